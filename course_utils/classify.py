"""Image classification, for chapter 7's Vision Transformer and its convolutional baseline.

* :class:`SmallCNN`: the baseline, two 3x3 convolutions with max-pooling and a linear layer;
* :func:`train_classifier`: the course's loop (:func:`course_utils.train.fit`) on shuffled
  minibatches of images, configured by :func:`classifier_config` (epochs, a warmup and a cosine
  decay, a time budget), with optional augmentation such as :func:`random_shift`;
  :func:`batch_sizes` for the per-epoch means of its history;
* :func:`accuracy`: the fraction classified right.

Shapes: images ``(batch, C, H, W)``, class ids ``(batch,)``, logits ``(batch, n_classes)``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from . import train

__all__ = ["SmallCNN", "accuracy", "batch_sizes", "classifier_config", "random_shift", "train_classifier"]


def random_shift(images: torch.Tensor, max_shift: int = 1, generator: torch.Generator | None = None) -> torch.Tensor:
    """Translate each image of ``(batch, C, H, W)`` by its own random offset of at most
    ``max_shift`` pixels in each direction, filling the uncovered border with zeros (data
    augmentation: a ViT has no built-in translation invariance, a CNN has some)."""
    if max_shift == 0:
        return images
    B, _, H, W = images.shape
    m = max_shift
    padded = F.pad(images, (m, m, m, m))                                 # (B, C, H + 2m, W + 2m)
    dy, dx = torch.randint(0, 2 * m + 1, (2, B), generator=generator).tolist()
    return torch.stack([padded[b, :, dy[b]:dy[b] + H, dx[b]:dx[b] + W] for b in range(B)])


class SmallCNN(nn.Module):
    """The baseline: two 3x3 convolutions with ReLU (padding 1), a 2x2 max-pool after each, and a
    linear layer. ``(batch, C, H, W)`` -> logits ``(batch, n_classes)``; ``H`` and ``W`` divisible by 4."""

    def __init__(self, channels: int = 1, n_classes: int = 10, width: int = 32, image_size: int = 8):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(channels, width, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(width, 2 * width, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.head = nn.Linear(2 * width * (image_size // 4) ** 2, n_classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(images).flatten(1))


@torch.no_grad()
def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int = 512) -> float:
    """The fraction of ``x (n, ...)`` that ``model`` (in eval mode) classifies as ``y (n,)``."""
    was_training = model.training
    model.eval()
    correct = sum(int((model(x[i:i + batch_size]).argmax(-1) == y[i:i + batch_size]).sum())
                  for i in range(0, len(x), batch_size))
    model.train(was_training)
    return correct / len(x)


def classifier_config(n: int, epochs: int, batch_size: int = 64, lr: float = 3e-3, warmup_steps: int = 0,
                      **fields) -> train.TrainConfig:
    """The :class:`~course_utils.train.TrainConfig` of ``epochs`` passes over ``n`` examples in
    minibatches of ``batch_size``: that many steps, a linear warmup of ``warmup_steps`` then a cosine
    decay of ``lr`` to 0 (:class:`~course_utils.train.WarmupCosine`); ``fields``: the config's other
    fields (``weight_decay``, ``max_seconds``, ...)."""
    return train.TrainConfig(epochs * -(-n // batch_size), lr=lr, schedule=train.WarmupCosine(warmup_steps), **fields)


def train_classifier(model: nn.Module, x: torch.Tensor, y: torch.Tensor, config: train.TrainConfig, *,
                     batch_size: int = 64, seed: int = 0, augment=None) -> train.History:
    """:func:`course_utils.train.fit` with ``config`` (e.g. :func:`classifier_config`) on shuffled
    minibatches of ``batch_size`` examples of ``(x, y)``, epoch after epoch, with cross-entropy.

    Args:
        x, y: ``(n, ...)`` inputs and ``(n,)`` class ids.
        config: steps, learning rate and schedule, weight decay (on the weight matrices only:
            :func:`course_utils.train.param_groups`), time budget (``max_seconds``).
        seed: the order of the minibatches and the augmentation (a ``torch.Generator`` of its own).
        augment: ``augment(images, generator=g) -> images`` applied to every training minibatch,
            e.g. :func:`random_shift`.
    Returns:
        :func:`~course_utils.train.fit`'s :class:`~course_utils.train.History`; the mean training loss
        per epoch is ``history.epoch_means(batch_sizes(len(x), batch_size))``.
    """
    if not isinstance(config, train.TrainConfig):
        raise TypeError("config must be a train.TrainConfig (e.g. classify.classifier_config(len(x), epochs)), "
                        f"got {type(config).__name__}")
    g = torch.Generator().manual_seed(seed)

    def epoch(_):
        order = torch.randperm(len(x), generator=g)
        for i in range(0, len(x), batch_size):
            idx = order[i:i + batch_size]
            yield (x[idx] if augment is None else augment(x[idx], generator=g)), y[idx]

    return train.fit(model, train.epochs(epoch), train.classification_loss, config)


def batch_sizes(n: int, batch_size: int) -> list[int]:
    """The sizes of one epoch's minibatches of :func:`train_classifier` over ``n`` examples."""
    return [min(batch_size, n - i) for i in range(0, n, batch_size)]
