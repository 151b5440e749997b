"""The two caches a drop-in model carries: per-item encoder features (on by default) and prefixes' KV (opt-in)."""

from __future__ import annotations

from ..cache.encoder_cache import DEFAULT_MAX_BYTES, EncoderCache
from ..cache.identity import any_module_training, cache_identity
from ..cache.prefix_cache import PrefixCache
from ..utils.logging import get_logger

_UNSET = object()
logger = get_logger(__name__)


class ModelCachesMixin:
    """`encoder_cache` and `prefix_cache` attributes of a drop-in model, checked when set.

    They live in the instance `__dict__` (not as `nn.Module` attributes), so they never become submodules, buffers or
    state-dict entries, and a deep copy of the model gets empty caches of its own.
    """

    @property
    def encoder_cache(self) -> EncoderCache | None:
        """The `EncoderCache` of per-image features (one of `DEFAULT_MAX_BYTES`, 512 MiB, by default); set `None` to turn it off."""
        cache = self.__dict__.get("_vlmprep_encoder_cache", _UNSET)
        if cache is _UNSET:
            cache = EncoderCache(max_bytes=DEFAULT_MAX_BYTES)
            self.__dict__["_vlmprep_encoder_cache"] = cache
        return cache

    @encoder_cache.setter
    def encoder_cache(self, cache: EncoderCache | None) -> None:
        if cache is not None and not isinstance(cache, EncoderCache):
            raise TypeError(f"`encoder_cache` must be a vlmprep.EncoderCache or None, got {type(cache).__name__}.")
        self.__dict__["_vlmprep_encoder_cache"] = cache

    def _encoder_cache_identity(self, part: str = "vision") -> tuple[str, ...]:
        # Entries made under other weights (of this model or another), another autocast state or another train/eval
        # mode must never be served: features depend on the vision part only, KV on the whole model.
        return cache_identity(self, part=part)

    @property
    def prefix_cache(self) -> PrefixCache | None:
        """The `PrefixCache` every `generate` call uses unless it passes `prefix_cache=` (`None`: off, the default)."""
        return self.__dict__.get("_vlmprep_prefix_cache")

    @prefix_cache.setter
    def prefix_cache(self, store: PrefixCache | None) -> None:
        if store is not None and not isinstance(store, PrefixCache):
            raise TypeError(f"`prefix_cache` must be a vlmprep.PrefixCache or None, got {type(store).__name__}.")
        self.__dict__["_vlmprep_prefix_cache"] = store

    def _prefix_store_of_call(self, prefix_cache: PrefixCache | None) -> PrefixCache | None:
        # The store one `generate` call uses: the one it passes, else the model's; none in train mode.
        if prefix_cache is not None and not isinstance(prefix_cache, PrefixCache):
            raise TypeError(
                f"`prefix_cache` must be a vlmprep.PrefixCache or None, got {prefix_cache!r}. Pass a store, e.g. "
                "`prefix_cache=PrefixCache()`, and keep it across calls to reuse prefixes."
            )
        store = prefix_cache if prefix_cache is not None else self.prefix_cache
        if store is not None and self.config.is_encoder_decoder:
            raise ValueError(
                f"{type(self).__name__} is an encoder-decoder: its decoder cross-attends to the whole encoder output of "
                "each prompt, so a decoder KV cache is never a prefix another prompt can resume from. Call `generate` "
                "without `prefix_cache` (and set `model.prefix_cache = None`): the encoder cache already keeps each "
                "image's features across prompts, so a new prompt on a cached image runs only the text encoder."
            )
        if store is not None and any_module_training(self):
            logger.warning_once(
                "The prefix cache is not used with the model in train mode (dropout changes the KV); this call "
                "prefills the whole prompt."
            )
            return None
        return store
