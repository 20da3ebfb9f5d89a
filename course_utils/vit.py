"""The Vision Transformer (Dosovitskiy et al., 2021): an image read as a sequence of patches.

* :func:`patchify` cuts ``(batch, C, H, W)`` images into flattened ``patch x patch`` squares;
* :class:`ViT`: a linear patch embedding, a learned class token, learned position embeddings,
  the course's :class:`~course_utils.blocks.TransformerStack` (Pre-LN, as in the paper) and a
  linear classification head on the class token's final state;
* :func:`attention_rollout` (Abnar & Zuidema, 2020) follows attention through all layers, and
  :func:`class_token_map` lays the class token's row out on the patch grid for drawing.

Training and measuring an image classifier (a ViT or the CNN baseline) is :mod:`course_utils.classify`.

Shapes: images ``(batch, C, H, W)``; tokens ``(batch, 1 + n_patches, d_model)`` with the class
token first; attention weights ``(batch, heads, 1 + n_patches, 1 + n_patches)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ._validate import check_config, check_int
from .blocks import BlockConfig, TransformerStack
from .positional import LearnedPositions

__all__ = ["ViT", "ViTConfig", "attention_rollout", "class_token_map", "patchify"]


def patchify(images: torch.Tensor, patch: int) -> torch.Tensor:
    """Cut images into non-overlapping ``patch x patch`` squares, flattened.

    ``images (batch, C, H, W)`` -> ``(batch, (H / patch) * (W / patch), C * patch * patch)``.
    Patches are numbered row by row (left to right, then top to bottom); inside a patch the
    features run over channels, then rows, then columns -- the layout of
    ``F.unfold(images, patch, stride=patch).transpose(1, 2)``.
    """
    if not isinstance(images, torch.Tensor) or images.dim() != 4:
        raise ValueError("images must be a (batch, C, H, W) tensor, got "
                         f"{tuple(images.shape) if isinstance(images, torch.Tensor) else type(images).__name__}")
    check_int(patch, "patch", 1)
    B, C, H, W = images.shape
    if H % patch or W % patch:
        raise ValueError(f"patch={patch} must divide the image height and width, got {H}x{W}")
    x = images.reshape(B, C, H // patch, patch, W // patch, patch)     # (B, C, gh, p, gw, p)
    x = x.permute(0, 2, 4, 1, 3, 5)                                     # (B, gh, gw, C, p, p)
    return x.reshape(B, (H // patch) * (W // patch), C * patch * patch)


@dataclass
class ViTConfig(BlockConfig):
    """A :class:`~course_utils.blocks.BlockConfig` (every block's sizes and switches; Pre-LN by
    default here, the paper's choice) and the Vision Transformer around the blocks: ``image_size``
    (height = width of the input images: 8 for the digits), ``patch`` (the side of the square
    patches; it must divide ``image_size``), ``channels``, ``n_classes`` and ``n_layers``."""

    norm_first: bool = True
    image_size: int = 8
    patch: int = 2
    channels: int = 1
    n_classes: int = 10
    n_layers: int = 2

    def __post_init__(self):
        super().__post_init__()
        for name in ("image_size", "patch", "channels", "n_classes", "n_layers"):
            check_int(getattr(self, name), name, 1)
        if self.image_size % self.patch:
            raise ValueError(f"patch={self.patch} must divide image_size={self.image_size}")


class ViT(nn.Module):
    """A Vision Transformer classifier.

    ``ViT(cfg)``, ``cfg`` a :class:`ViTConfig` (``ViTConfig(patch=4, d_model=16, n_heads=2)``); the
    config is ``model.cfg``, its fields are read there; :attr:`grid` and :attr:`n_patches` follow from it.

    The patch embedding: ``patch_embed`` (``nn.Linear(C * patch**2, d_model)``), ``cls_token``
    (a ``(1, 1, d_model)`` parameter) and ``positions`` (:class:`~course_utils.positional.LearnedPositions`
    over ``1 + n_patches`` positions); then ``stack`` (:class:`~course_utils.blocks.TransformerStack`:
    ``stack.layers``, and ``stack.norm``, the final LayerNorm with Pre-LN, identity with Post-LN) and
    ``head`` (``nn.Linear(d_model, n_classes)``).
    """

    def __init__(self, cfg: ViTConfig):
        super().__init__()
        self.cfg = check_config(cfg, ViTConfig, "ViT", "ViT(ViTConfig(patch=..., d_model=..., n_heads=...))")
        self.patch_embed = nn.Linear(cfg.channels * cfg.patch * cfg.patch, cfg.d_model)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, cfg.d_model))
        nn.init.normal_(self.cls_token, std=0.02)
        self.positions = LearnedPositions(cfg.d_model, 1 + self.n_patches)
        self.dropout = nn.Dropout(cfg.dropout)
        self.stack = TransformerStack(cfg.block_config(), cfg.n_layers)
        self.head = nn.Linear(cfg.d_model, cfg.n_classes)

    @property
    def grid(self) -> int:
        """Patches per side, ``image_size // patch``."""
        return self.cfg.image_size // self.cfg.patch

    @property
    def n_patches(self) -> int:
        """Patches per image, ``grid ** 2``."""
        return self.grid ** 2

    def embed(self, images: torch.Tensor) -> torch.Tensor:
        """``(batch, C, H, W)`` -> tokens ``(batch, 1 + n_patches, d_model)``: the class token,
        then the embedded patches, each plus its learned position."""
        expected = (self.cfg.channels, self.cfg.image_size, self.cfg.image_size)
        if images.dim() != 4 or tuple(images.shape[1:]) != expected:
            raise ValueError(f"images must have shape (batch, {', '.join(map(str, expected))}), "
                             f"got {tuple(images.shape)}")
        x = self.patch_embed(patchify(images, self.cfg.patch))                  # (B, N, d_model)
        cls = self.cls_token.expand(x.shape[0], -1, -1)                     # (B, 1, d_model)
        return self.dropout(self.positions(torch.cat([cls, x], dim=1)))    # (B, 1 + N, d_model)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """``images (batch, C, H, W)`` -> logits ``(batch, n_classes)``, from the class token's final state."""
        return self.head(self.stack(self.embed(images)).x[:, 0])

    def forward_with_weights(self, images: torch.Tensor) -> tuple[torch.Tensor, list]:
        """As :meth:`forward`, and the attention weights: ``(logits, weights)``, ``weights`` a list
        with one ``(batch, heads, 1 + n_patches, 1 + n_patches)`` tensor per layer (row 0: the class token)."""
        x, weights, _ = self.stack(self.embed(images), need_weights=True)
        return self.head(x[:, 0]), weights


def attention_rollout(weights: list[torch.Tensor] | tuple[torch.Tensor, ...], residual: bool = True) -> torch.Tensor:
    """Attention rollout (Abnar & Zuidema, 2020): how much each input token flows into each
    position after all layers, following attention through the residual connections.

    Per layer the heads are averaged, ``W = mean_h A_h``; the residual connection is accounted
    for as ``A = 0.5 * W + 0.5 * I`` (``residual=False`` uses ``W`` alone); the layers are chained
    by matrix product, the last layer on the left: ``R = A_L @ ... @ A_2 @ A_1``.

    Args:
        weights: one ``(batch, heads, N, N)`` tensor per layer, first layer first (rows sum to 1).
    Returns:
        ``R (batch, N, N)``; row ``i`` sums to 1 and says how much of position ``i``'s final state
        comes from each input token. Row 0 of a ViT is the class token's.
    """
    if not weights or any(not isinstance(w, torch.Tensor) or w.dim() != 4 or w.shape[-1] != w.shape[-2]
                          for w in weights):
        raise ValueError("weights must be a non-empty list of (batch, heads, N, N) tensors, one per layer "
                         "(from forward_with_weights)")
    N = weights[0].shape[-1]
    eye = torch.eye(N, dtype=weights[0].dtype, device=weights[0].device)
    rollout = None
    for w in weights:
        a = w.mean(dim=1)                                                   # (batch, N, N)
        if residual:
            a = 0.5 * a + 0.5 * eye
        rollout = a if rollout is None else a @ rollout
    return rollout


def class_token_map(matrix: torch.Tensor, grid: int) -> torch.Tensor:
    """The class token's row over the patches, ``(batch, N, N)`` with ``N = 1 + grid**2`` (an
    attention matrix or a rollout; per head: ``(batch, heads, N, N)``) -> ``(batch, [heads,]
    grid, grid)``, patch (r, c) at row r, column c, ready to draw over the image."""
    if matrix.shape[-1] != 1 + grid * grid:
        raise ValueError(f"a {grid}x{grid} grid needs matrices over {1 + grid * grid} tokens (class token "
                         f"first), got {matrix.shape[-1]}")
    return matrix[..., 0, 1:].reshape(*matrix.shape[:-2], grid, grid)
