"""How `vlmprep serve` loads a model in its engine process: the drop-in, and vlmprep's runners around it.

transformers 5.25 loads each served model in a spawned process (`EngineClient.run_engine`), which gets a pickled
copy of the server's `ModelLoader` and `GenerationState`: `vlmprep.register()` in the API server would not reach it,
and the engine would load transformers' classes without a word. The loader is upstream's seam into that process:

- `VisionPrepModelLoader.load_model_and_processor` registers the drop-ins there before loading, and refuses a model
  that still comes out as transformers' class where vlmprep has a drop-in;
- upstream offers no seam for the runner (`run_engine` builds `GenerateRunner` or `CBGenerateRunner` by name), so the
  loader, in the engine process only, points those two names of `transformers.cli.serving.model_manager` at vlmprep's
  runners (`vlmprep.serving.runners`). That process exists for this model alone; `utils/check_upstream_hooks.py`
  checks that `run_engine` still builds its runner by those names, after loading.
- `VisionPrepGenerationState` says yes to continuous batching for a drop-in: the API server cannot see whether the
  engine runs its images exactly (that needs the loaded model), so the engine process decides (`runners.runner_for`).
"""

from __future__ import annotations

import multiprocessing
from typing import Any

from transformers.cli.serving.model_manager import ModelLoader
from transformers.cli.serving.utils import GenerationState

from .errors import server_logger
from .policy import DEFAULT_LIMITS, ServingPolicy

__all__ = ["RUNNER_NAMES", "VisionPrepGenerationState", "VisionPrepModelLoader", "check_served_class"]

logger = server_logger()

# The names `EngineClient.run_engine` builds its runner by, in `transformers.cli.serving.model_manager`.
RUNNER_NAMES = ("GenerateRunner", "CBGenerateRunner")


class VisionPrepModelLoader(ModelLoader):
    """transformers' `ModelLoader`, loading vlmprep's drop-in and runners in the engine process (module docstring).

    Args:
        *args, **kwargs: `ModelLoader`'s.
        policy (`ServingPolicy`, *optional*, defaults to `DEFAULT_LIMITS`): the sizes of the engine's caches.
    """

    def __init__(self, *args, policy: ServingPolicy = DEFAULT_LIMITS, **kwargs):
        super().__init__(*args, **kwargs)
        self.policy = policy
        self.stats_on_stop = False

    @classmethod
    def adopt(cls, loader: ModelLoader, policy: ServingPolicy) -> VisionPrepModelLoader:
        """The same settings as `loader` (built by upstream's `Serve`), as a `VisionPrepModelLoader`.

        Args:
            loader (`ModelLoader`): upstream's loader.
            policy (`ServingPolicy`): the server's policy.

        Returns:
            `VisionPrepModelLoader`
        """
        if isinstance(loader, cls):
            return loader
        adopted = _as_subclass(loader, cls)
        adopted.policy, adopted.stats_on_stop = policy, False
        return adopted

    def load_model_and_processor(self, model_id: str, on_progress: Any = None):
        """Upstream's load, with the drop-ins registered and, in an engine process, vlmprep's runners in place.

        Args:
            model_id (`str`): the model (see upstream).
            on_progress (`Callable`, *optional*): upstream's progress callback.

        Returns:
            `tuple[PreTrainedModel, ProcessorMixin]`
        """
        from ..registration import register

        register()
        if multiprocessing.parent_process() is not None:  # the engine process `EngineClient.start_process` spawned
            services = _use_vlmprep_runners(self.policy)
            if self.stats_on_stop:
                _write_stats_when_stopped(model_id, services)
        model, processor = super().load_model_and_processor(model_id, on_progress=on_progress)
        check_served_class(model)
        return model, processor


def check_served_class(model: Any) -> None:
    """Refuses a loaded model that is transformers' class where vlmprep has a drop-in for its type.

    Raises:
        `RuntimeError`: naming both classes.
    """
    from ..models.auto import DROP_IN_CLASSES

    drop_in = DROP_IN_CLASSES.get(getattr(model.config, "model_type", None))
    if drop_in is not None and not isinstance(model, drop_in):
        raise RuntimeError(
            f"the server loaded {type(model).__module__}.{type(model).__name__}, not vlmprep's "
            f"{drop_in.__module__}.{drop_in.__name__}: transformers' loader no longer goes through the auto classes "
            "`vlmprep.register()` sets. Install the transformers version vlmprep supports."
        )


def _use_vlmprep_runners(policy: ServingPolicy):
    """Points `run_engine`'s runner names at vlmprep's runners, sharing one `EngineServices` (this process's), which
    it returns; its `runner` is the one built."""
    from transformers.cli.serving import model_manager

    from .runners import EngineServices, VisionPrepGenerateRunner, runner_for

    services = EngineServices(policy)

    def sequential(model, processor, send_results):
        services.runner = VisionPrepGenerateRunner(model, processor, send_results, services)
        return services.runner

    def batched(model, processor, send_results, cb_config=None, context_length=None):
        services.runner = runner_for(
            model, processor, send_results, services, cb_config, context_length=context_length
        )
        return services.runner

    model_manager.GenerateRunner, model_manager.CBGenerateRunner = sequential, batched
    return services


def _write_stats_when_stopped(model_id: str, services) -> None:
    """With several API servers, their supervisor stops the engine process first (SIGTERM): it then writes its own
    counters to `$VLMPREP_SERVE_STATS` (no API server can ask for them any more) and exits."""
    import os
    import signal

    from .runners import engine_stats
    from .stats import SERVE_STATS_ENV, report_served_stats

    def write_and_exit(signum, frame):
        runner = getattr(services, "runner", None)
        if runner is not None:
            report_served_stats({model_id: {**engine_stats(runner, services), "media_cache": None}})
        os._exit(0)

    if os.environ.get(SERVE_STATS_ENV):
        signal.signal(signal.SIGTERM, write_and_exit)


class VisionPrepGenerationState(GenerationState):
    """transformers' `GenerationState`, which also takes continuous batching for a drop-in (module docstring)."""

    @classmethod
    def adopt(cls, state: GenerationState) -> VisionPrepGenerationState:
        """The same settings as `state` (built by upstream's `Serve`), as a `VisionPrepGenerationState`.

        Args:
            state (`GenerationState`): upstream's.

        Returns:
            `VisionPrepGenerationState`
        """
        return state if isinstance(state, cls) else _as_subclass(state, cls)

    def use_continuous_batching(self, config: Any, processor: Any) -> bool:
        """Upstream's answer, and `True` with `--continuous-batching` for a model vlmprep has a drop-in for.

        Args:
            config (`PretrainedConfig`): the model's config.
            processor (`ProcessorMixin`): its processor.

        Returns:
            `bool`
        """
        from ..models.auto import DROP_IN_CLASSES

        if self._continuous_batching and getattr(config, "model_type", None) in DROP_IN_CLASSES:
            return True
        return super().use_continuous_batching(config, processor)


def _as_subclass(instance: Any, subclass: type) -> Any:
    """A `subclass` instance holding `instance`'s attributes: upstream's `Serve` builds its loader and state itself."""
    adopted = subclass.__new__(subclass)
    adopted.__dict__.update(vars(instance))
    return adopted
