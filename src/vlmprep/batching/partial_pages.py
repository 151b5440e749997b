"""Partial-page sharing: a request continuing a finished one (a chat's next turn) also reuses the tokens of its last,
partly filled page.

Upstream's engine shares whole pages only (`match_prefix_blocks` hashes full pages; a finished request's last page,
never complete, goes back to the pool): each turn of a chat prefills up to a page less one token of the earlier turns
again (issue 28: 1.33x the minimum with 16-token pages). `PartialPageSharing` (a scheduler mixin, installed with the
prefill counting) keeps that page:

1. when a request finishes, its last page, if partly written and owned by it alone, is registered in the allocator's
   ledger under a hash of its parent page's hash, the marker `PARTIAL_PAGE_MARKER` and the tokens written in it: it
   then stays as one of upstream's cached pages (evicted under memory pressure, forgotten on a reset or a weight
   change like any other), never matched by upstream (whose hashes cover full pages);
2. when a request has matched whole pages, the partly filled pages following the last one it matched are looked up
   (`_partial_pages`, an index of these hashes by parent hash, checked against the ledger); the one sharing the most
   tokens with what follows is copied into a fresh page of the request, and those tokens are not prefilled. The copy
   holds the earlier request's KV of exactly those tokens at exactly those positions (same parent chain, same tokens);
   the rest of the page is overwritten by the request's own prefill before anything reads it.

Only for engines whose every attention group shares pages (full attention); never where the resume point would fall
strictly inside a bidirectional image block (Gemma3), where the whole-page rules of `vlmprep.batching.blocks` apply.
"""

from __future__ import annotations

from collections import OrderedDict

from transformers.generation.continuous_batching.cache_allocators.cache_allocator import compute_block_hash
from transformers.generation.continuous_batching.requests import RequestStatus

__all__ = ["INDEXED_FULL_PAGES", "MAX_PARTIAL_PAGES", "PARTIAL_PAGE_MARKER", "PartialPageSharing"]

# Partly filled pages remembered (each also bounded by upstream's eviction of cached pages).
MAX_PARTIAL_PAGES = 256
# Full pages before a finished request's last one indexed for sharing their heads (a chat's next prompt may diverge
# from the answer a few tokens before its end: a re-tokenized answer, a template that rewrites the last turn).
INDEXED_FULL_PAGES = 4
# Token id written before a partial page's tokens in its hash: no full page (token ids >= 0) hashes alike.
PARTIAL_PAGE_MARKER = -1


class PartialPageSharing:
    """Scheduler mixin: a finished request's last, partly filled page is shared with requests that continue it."""

    cache: object
    active_requests: dict
    # (parent hashes, one per attention group) -> {(tokens, partial-page hashes): None}, least recently added first
    _partial_pages: OrderedDict

    def _infer_request_tokens(self, state, request_ids_to_remove_from_waiting: set[str]) -> list[int]:
        was_pending = state.status == RequestStatus.PENDING
        tokens = super()._infer_request_tokens(state, request_ids_to_remove_from_waiting)
        # Upstream moves a pending request to prefilling when it matched whole pages
        matched = was_pending and state.status == RequestStatus.PREFILLING and _shares_pages(self.cache)
        if matched and self.extend_with_partial_page(state):
            return state.remaining_prefill_tokens
        return tokens

    def finish_request(self, request_id: str) -> None:
        state = self.active_requests.get(request_id)
        # A request that completed: its status set through the setter, which stamps the end of its lifespan (the
        # offloading manager finishes the requests it evicts by setting `_status`, and their KV may be in flight)
        completed = state is not None and state.status == RequestStatus.FINISHED and state.lifespan[1] >= 0
        if completed and _shares_pages(self.cache):
            self._keep_last_page(request_id, state)
        super().finish_request(request_id)

    def _keep_last_page(self, request_id: str, state) -> None:
        """Keeps the finished request's last, partly filled page (see the module docstring) and indexes it, with its
        last `INDEXED_FULL_PAGES` full pages, by parent hash: a later prompt diverging inside one of them shares its
        head."""
        allocators = list(self.cache.cache_allocators.values())
        pages = {allocator.tokens_per_page for allocator in allocators}
        if len(pages) != 1:
            return
        page = pages.pop()
        tokens = state.initial_tokens + state.generated_tokens
        written = min(state.position_offset, len(tokens) - 1)  # the last token sampled is never fed
        last, filled = divmod(written, page)
        tables = [allocator.block_table.get(request_id) or [] for allocator in allocators]
        if any(len(table) < last + (filled > 0) for table in tables):
            return
        for allocator, table in zip(allocators, tables, strict=True):
            _hash_full_pages(allocator, table[:last], tokens, page)
        for index in range(max(1, last - INDEXED_FULL_PAGES), last):
            parents = [
                allocator.ledger.block_to_hash.get(table[index - 1])
                for allocator, table in zip(allocators, tables, strict=True)
            ]
            hashes = [
                allocator.ledger.block_to_hash.get(table[index])
                for allocator, table in zip(allocators, tables, strict=True)
            ]
            if None not in parents and None not in hashes:
                self._index_page(tuple(parents), tokens[index * page : (index + 1) * page], tuple(hashes))
        if filled and last > 0:
            self._keep_partial_page(allocators, tables, last, tokens[last * page : last * page + filled])

    def _keep_partial_page(self, allocators: list, tables: list, index: int, head: list[int]) -> None:
        parents, hashes = [], []
        for allocator, table in zip(allocators, tables, strict=True):
            ledger, block = allocator.ledger, table[index]
            parent = ledger.block_to_hash.get(table[index - 1])
            if parent is None or block in ledger.block_to_hash or block in ledger.shared_ref_counts:
                return  # no chain to key it by, or a page that is not this request's alone
            parents.append(parent)
            hashes.append((allocator, block, compute_block_hash(parent, [PARTIAL_PAGE_MARKER, *head])))
        registered = []
        for allocator, block, page_hash in hashes:
            if allocator.ledger.register_new_hash(block, page_hash) is not None:
                # An identical partial page is kept already (the same chat finished twice): this one is not
                for allocator, block, page_hash in hashes[: len(registered)]:
                    allocator.ledger.block_to_hash.pop(block)
                    allocator.ledger.hash_to_block.pop(page_hash)
                return
            registered.append(page_hash)  # upstream's release now keeps the page as a cached one
        self._index_page(tuple(parents), head, tuple(registered))

    def _index_page(self, parents: tuple, head: list[int], page_hashes: tuple) -> None:
        entries = self._partial_pages.setdefault(parents, OrderedDict())
        entries[(tuple(head), page_hashes)] = None
        entries.move_to_end((tuple(head), page_hashes))
        self._partial_pages.move_to_end(parents)
        while sum(len(value) for value in self._partial_pages.values()) > MAX_PARTIAL_PAGES:
            oldest = next(iter(self._partial_pages.values()))
            oldest.popitem(last=False)
            if not oldest:
                self._partial_pages.popitem(last=False)

    def extend_with_partial_page(self, state) -> int:
        """After upstream matched whole pages for `state` (now prefilling), shares the partly filled page that
        continues them best: copied into a fresh page of the request, its tokens dropped from the prefill.

        Args:
            state (`RequestState`): a request that upstream's prefix match has just moved to prefilling.

        Returns:
            `int`: the tokens shared this way (0 when none).
        """
        allocators = list(self.cache.cache_allocators.values())
        matched = state.position_offset
        pages = {allocator.tokens_per_page for allocator in allocators}
        if len(pages) != 1 or matched == 0 or matched % next(iter(pages)):
            return 0
        parents = []
        for allocator in allocators:
            table = allocator.block_table.get(state.request_id) or []
            parent = allocator.ledger.block_to_hash.get(table[-1]) if table else None
            if parent is None or len(table) * allocator.tokens_per_page != matched:
                return 0
            parents.append(parent)
        following = state.remaining_prefill_tokens[: next(iter(pages))]
        shared, sources = self._best_partial_page(tuple(parents), following, len(state.remaining_prefill_tokens) - 1)
        shared = _outside_blocks(state, matched, shared)
        if shared == 0 or not _one_free_block_each(self.cache.pool, allocators):
            return 0
        for allocator, source in zip(allocators, sources, strict=True):
            (fresh,) = self.cache.pool.get_free_blocks(allocator.index, 1)
            allocator.copy_blocks([source], [fresh])
            allocator.block_table[state.request_id].append(fresh)
        state.remaining_prefill_tokens = state.remaining_prefill_tokens[shared:]
        state.position_offset += shared
        return shared

    def _best_partial_page(self, parents: tuple, following: list[int], limit: int) -> tuple[int, list[int]]:
        # The kept partial page after `parents` sharing the longest head with `following` (at most `limit` tokens),
        # as (shared tokens, its block in each attention group); stale entries (evicted pages) are dropped
        entries = self._partial_pages.get(parents)
        best, sources = 0, []
        for entry in list(entries or ()):
            head, page_hashes = entry
            blocks = [
                allocator.ledger.hash_to_block.get(page_hash)
                for allocator, page_hash in zip(self.cache.cache_allocators.values(), page_hashes, strict=True)
            ]
            if any(block is None for block in blocks):
                del entries[entry]
                continue
            common = 0
            while common < min(len(head), len(following), limit) and head[common] == following[common]:
                common += 1
            if common > best:
                best, sources = common, blocks
        return best, sources


def _hash_full_pages(allocator, table: list[int], tokens: list[int], page: int) -> None:
    # Upstream hashes the pages a forward completes, except in the forward that finishes the request (its
    # `mark_complete_blocks` skips finished requests): those pages are hashed here, so that they are shared too
    ledger, parent = allocator.ledger, None
    for index, block in enumerate(table):
        page_hash = ledger.block_to_hash.get(block)
        if page_hash is None:
            if block in ledger.shared_ref_counts:
                return
            page_hash = compute_block_hash(parent, tokens[index * page : (index + 1) * page])
            if ledger.register_new_hash(block, page_hash) is not None:
                return  # an identical page is shared already; this copy goes back to the pool
        parent = page_hash


def _one_free_block_each(pool, allocators: list) -> bool:
    # A fresh page per attention group, from a new sector where the group has no free page left (as upstream's
    # allocation does); `False`, allocating nothing, when the pool has too few sectors
    short = [allocator for allocator in allocators if pool.count_free_blocks(allocator.index) < 1]
    if len(short) > pool.num_free_sectors:
        return False
    for allocator in short:
        pool.allocate_sector(allocator.index)
    return True


def _shares_pages(cache) -> bool:
    return cache.use_prefix_sharing and all(
        allocator.use_block_sharing for allocator in cache.cache_allocators.values()
    )


def _outside_blocks(state, matched: int, shared: int) -> int:
    # A resume point strictly inside a bidirectional image block is left to the whole-page rules: no partial share
    items = getattr(state, "items", None)
    for start, end in getattr(items, "blocks", None) or ():
        if start < matched + shared < end or start < matched < end:
            return 0
    return shared
