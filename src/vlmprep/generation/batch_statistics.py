"""Encoding in train mode: what makes an item's features depend on the other items encoded with it."""

from __future__ import annotations

import torch

# Normalization layers that, in train mode, normalize over the batch and update their running statistics
BATCH_NORM_LAYERS = (
    torch.nn.BatchNorm1d,
    torch.nn.BatchNorm2d,
    torch.nn.BatchNorm3d,
    torch.nn.SyncBatchNorm,
    torch.nn.LazyBatchNorm1d,
    torch.nn.LazyBatchNorm2d,
    torch.nn.LazyBatchNorm3d,
)


def check_no_batch_statistics(owner: torch.nn.Module) -> None:
    """Refuse to encode items while a BatchNorm layer of the encoders is in train mode.

    In train mode BatchNorm normalizes over the items encoded together and updates its running statistics: an item's
    features then depend on the others in its batch, and the drop-in encodes only the items prefill needs (once per
    distinct item), not every item of the call as upstream does. Its features and the layer's statistics would part
    from upstream's, silently and for every later call.

    Args:
        owner (`torch.nn.Module`): the module holding the encoders (`encoding_module`).

    Raises:
        `ValueError`: a BatchNorm layer is in train mode.
    """
    training = [
        name for name, module in owner.named_modules() if isinstance(module, BATCH_NORM_LAYERS) and module.training
    ]
    if training:
        raise ValueError(
            f"The encoders' BatchNorm layers are in train mode ({', '.join(training[:3])}): they then normalize over "
            "the items encoded together, so an item's features depend on the others, and `generate` encodes only the "
            "items prefill needs, once each. Put the encoders in eval mode to generate (`model.eval()`, or the tower's "
            "`.eval()`); training forwards are not affected."
        )
