"""What continuous batching (`vlmprep.batching`) and `vlmprep serve` need from transformers' private engine and server.

Both extend transformers' own classes: they override private methods (`_generation_step`, `_schedule_request`, ...)
and read private attributes set in upstream constructors (`self._request_lock`, `processor.scheduler`, ...). A release
that renames one would make an override silently unused, or fail deep inside the engine's thread. This table names
every one of them; `missing_engine_hooks` (run by `utils/check_upstream_hooks.py` in `make repo-consistency`) checks
them against the installed transformers. It is not run at import (the engine and server are optional paths, and the
server's modules need the `serving` extra): `check_batching_support` checks the engine's part before the engine
starts, and `vlmprep serve --continuous-batching` the server's before the server starts.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import re

from ._compat import method_problems, serving_unsupported_message

# "module:Class" -> {method: parameters the override declares or passes on}. Where a vlmprep class overrides a method,
# the upstream method must exist with these parameters; a method that only reads upstream state lists no parameters.
ENGINE_METHODS: dict[str, dict[str, tuple[str, ...]]] = {
    "transformers.generation.continuous_batching.continuous_api:ContinuousBatchingManager": {
        "__init__": ("model", "generation_config", "continuous_batching_config", "workload_hints"),
        "add_request": ("input_ids", "request_id", "max_new_tokens", "streaming", "record_timestamps", "eos_token_id"),
        "_create_batch_processor": (),
        "_generation_loop_body": ("batch_processor", "bootstrapping"),
        "_generation_step": (),
    },
    "transformers.generation.continuous_batching.scheduler:Scheduler": {
        "_schedule_request": ("state", "request_tokens", "token_budget", "request_ids_to_remove_from_waiting"),
        "_process_candidates": ("candidates", "token_budget", "cache_budget", "request_ids_to_remove_from_waiting"),
    },
    "transformers.generation.continuous_batching.requests:RequestState": {
        "to_generation_output": (),
        "fork": ("new_request_id",),
        "create_equivalent_initial_request": (),
    },
    "transformers.generation.continuous_batching.continuous_api:ContinuousMixin": {
        "init_continuous_batching": ("generation_config", "continuous_batching_config", "workload_hints"),
        "generate_batch": ("inputs", "generation_config", "continuous_batching_config"),
    },
    "transformers.generation.continuous_batching.cache:PagedAttentionCache": {"evict_cached_blocks": ()},
    # `vlmprep serve` (transformers 5.25's server: an engine process per model, `vlmprep/serving/`)
    "transformers.cli.serving.utils:GenerateRunner": {
        "__init__": ("model", "processor", "send_results"),
        "generate": ("request_id", "inputs", "generation_kwargs", "stream"),
    },
    "transformers.cli.serving.utils:CBGenerateRunner": {
        "__init__": ("model", "processor", "send_results", "cb_config", "context_length"),
        "generate": ("request_id", "inputs", "generation_kwargs", "stream"),
    },
    "transformers.cli.serving.utils:GenerationState": {"use_continuous_batching": ("config", "processor")},
    "transformers.cli.serving.utils:BaseHandler": {
        "get_processor_inputs_from_messages": ("messages", "modality"),
        "_build_generation_kwargs": ("body", "model_generation_config"),
        "_check_prompt_length": ("engine", "inputs"),
        "_chat_template_kwargs": ("body",),
        "_normalize_tools": ("tools",),
        "_log_request": ("request_id", "engine", "inputs", "generation_kwargs", "stream", "body"),
    },
    "transformers.cli.serving.chat_completion:ChatCompletionHandler": {
        "handle_request": ("body", "request_id"),
        "_streaming": ("request_id", "engine", "inputs", "generation_kwargs", "tools", "stream_options"),
        "_non_streaming": ("request_id", "engine", "inputs", "generation_kwargs", "tools"),
    },
    "transformers.cli.serving.model_manager:ModelLoader": {"load_model_and_processor": ("model_id", "on_progress")},
    "transformers.cli.serving.model_manager:ModelManager": {
        "__init__": ("loader", "generation_state", "model_timeout", "force_model", "engine_connection"),
        "get_engine": ("model",),
        "load_model_streaming": ("model",),
    },
    "transformers.cli.serving.model_manager:EngineClient": {
        "_send_request": ("method", "args", "streamer"),
        "generate_streaming": ("inputs", "generation_kwargs", "response_parser"),
        "run_engine": ("load", "generation_state"),
    },
    "transformers.cli.serve:Serve": {"run": ("socket", "engine_connection"), "run_api_servers": ("count",)},
}

# "module:Class" -> private (or engine-internal) attributes vlmprep reads on its instances: each must be a field of
# the class (dataclasses) or be assigned (`self.<name> =`) somewhere in its source.
ENGINE_ATTRIBUTES: dict[str, tuple[str, ...]] = {
    "transformers.generation.continuous_batching.continuous_api:ContinuousBatchingManager": (
        "model",
        "generation_config",
        "logit_processor",
        "input_queue",
        "output_router",
        "batch_processor",
        "_request_counter",
        "_request_lock",
        "num_return_sequences",
    ),
    "transformers.generation.continuous_batching.continuous_api:ContinuousBatchProcessor": (
        "scheduler",
        "offloading_manager",
        "sliding_window",
        "model_runner",
        "inputs_and_outputs",
        "max_batch_tokens",
        "cache",
    ),
    "transformers.generation.continuous_batching.cache:PagedAttentionCache": ("cache_allocators",),
    "transformers.generation.continuous_batching.cache_allocators.cache_allocator:CacheAllocator": ("ledger",),
    "transformers.generation.continuous_batching.cache_allocators.cache_allocator:BlockLedger": (
        "hash_to_block",
        "block_to_hash",
    ),
    "transformers.generation.continuous_batching.scheduler:Scheduler": (
        "cache",
        "safety_margin",
        "max_requests_per_batch",
    ),
    "transformers.generation.continuous_batching.requests:RequestState": (
        "request_id",
        "status",
        "position_offset",
        "num_children",
    ),
    "transformers.cli.serving.utils:GenerateRunner": ("model", "send_results"),
    "transformers.cli.serving.utils:CBGenerateRunner": ("manager",),
    "transformers.cli.serving.utils:GenerationState": ("_continuous_batching",),
    "transformers.cli.serving.model_manager:ModelLoader": (),
    "transformers.cli.serving.model_manager:EngineClient": ("processor", "model_config", "generation_config"),
    "transformers.cli.serve:Serve": (
        "loader",
        "generation_state",
        "log_level",
        "enable_log_requests",
        "model_timeout",
        "force_model",
        "chat_template_kwargs",
        "host",
        "port",
        "enable_cors",
    ),
}

# Upstream has no seam for the engine process's runner: `EngineClient.run_engine` builds it by these names of its
# module, after calling the loader, which points them at vlmprep's runners (`vlmprep/serving/loader.py`).
ENGINE_RUNNER_NAMES = ("GenerateRunner", "CBGenerateRunner")


# The server's classes (`transformers.cli.serving`) need the `serving` extra; the engine's do not.
_SERVER_MODULES = "transformers.cli."


def _resolve(target: str):
    module_name, _, class_name = target.partition(":")
    try:
        return getattr(importlib.import_module(module_name), class_name, None)
    except ImportError:
        return None


def missing_engine_hooks(include_server: bool | None = None) -> list[str]:
    """Descriptions of the engine and server methods, parameters and attributes the installed transformers lacks.

    Args:
        include_server (`bool`, *optional*):
            also check the server's classes (`vlmprep serve`), whose modules need the `serving` extra. By default,
            only where `vlmprep serve` runs on the installed transformers (`serving_unsupported_message`): on a
            release whose server it refuses (5.25), the server's names are not expected.

    Returns:
        `list[str]`: empty when everything `vlmprep.batching` (and `vlmprep serve`) rely on is there.
    """
    if include_server is None:
        include_server = serving_unsupported_message() is None
    problems = []
    for target, methods in ENGINE_METHODS.items():
        if not include_server and target.startswith(_SERVER_MODULES):
            continue
        cls = _resolve(target)
        if cls is None:
            problems.append(f"{target} is missing")
            continue
        for name, parameters in methods.items():
            problems += method_problems(f"{target}.{name}", getattr(cls, name, None), parameters)
    for target, attributes in ENGINE_ATTRIBUTES.items():
        if not include_server and target.startswith(_SERVER_MODULES):
            continue
        cls = _resolve(target)
        if cls is None:
            problems.append(f"{target} is missing")
            continue
        upstream = [klass for klass in cls.__mro__ if klass.__module__.startswith("transformers")]
        source = "".join(inspect.getsource(klass) for klass in upstream)
        fields = {name for klass in upstream for name in getattr(klass, "__annotations__", {})}  # dataclass fields
        absent = [
            name
            for name in attributes
            if name not in fields
            and not re.search(rf"self\.{name}\b(\s*:[^=\n]*)?(\s*,\s*self\.\w+)*\s*=(?!=)", source)
        ]
        if absent:
            problems.append(f"{target} no longer sets attribute(s) {absent}")
    if include_server:
        problems += _engine_runner_problems()
    return problems


def _engine_runner_problems() -> list[str]:
    """Whether `EngineClient.run_engine` still calls the loader, then builds its runner by `ENGINE_RUNNER_NAMES`."""
    engine_client = _resolve("transformers.cli.serving.model_manager:EngineClient")
    run_engine = getattr(engine_client, "run_engine", None)
    if run_engine is None:
        return []  # reported above
    source = inspect.getsource(run_engine)
    loads, names = source.find("load("), run_engine.__code__.co_names
    missing = [name for name in ENGINE_RUNNER_NAMES if name not in names or source.find(f"{name}(") < loads]
    if loads < 0 or missing:
        return [
            "transformers.cli.serving.model_manager:EngineClient.run_engine no longer builds "
            f"{', '.join(missing) or 'its runner'} by name after loading the model (vlmprep's loader replaces them)"
        ]
    return []


@functools.cache
def engine_hook_problems() -> tuple[str, ...]:
    """`missing_engine_hooks(include_server=False)`, computed once (it reads upstream's source).

    Returns:
        `tuple[str, ...]`: empty when the engine has everything `vlmprep.batching` extends.
    """
    return tuple(missing_engine_hooks(include_server=False))
