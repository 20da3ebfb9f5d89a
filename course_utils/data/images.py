"""Images: scikit-learn's bundled 8x8 handwritten digits (chapter 7's ViT).
"""

from __future__ import annotations

import torch

from .._validate import check_int

__all__ = ["DIGITS_N_TEST", "digits"]


#: The digits' fixed split: this many test images, drawn per class by :func:`digits`.
DIGITS_N_TEST = 360


def digits(n_test: int = DIGITS_N_TEST, seed: int = 0
           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """scikit-learn's 1797 handwritten digits (8x8 pixels, UCI "optdigits"), shipped inside the
    package: no download. Returns ``(x_train, y_train, x_test, y_test)``.

    ``x`` is ``(n, 1, 8, 8)`` float32 in [0, 1] (the 0-16 grey levels divided by 16), ``y`` is
    ``(n,)`` long in 0-9. The split is stratified: each class gives the same share (rounded, the
    shares adding up to ``n_test``) of its images to the test set, chosen at random by ``seed``;
    the defaults are the course's fixed split (1437 train, 360 test).
    """
    from sklearn.datasets import load_digits  # imported here: only chapter 7 needs scikit-learn

    check_int(n_test, "n_test", 1, 1796, "scikit-learn's digits hold 1797 images")
    bunch = load_digits()
    x = torch.tensor(bunch.images, dtype=torch.float32).unsqueeze(1) / 16.0     # (1797, 1, 8, 8)
    y = torch.tensor(bunch.target, dtype=torch.long)
    # each class's share of n_test, rounded so that the shares add up to n_test exactly
    share = torch.bincount(y, minlength=10).double() * n_test / len(y)
    take = share.floor().long()
    take[(share - take).argsort(descending=True, stable=True)[: n_test - int(take.sum())]] += 1
    g = torch.Generator().manual_seed(seed)
    test_idx = []
    for c in range(10):
        idx = (y == c).nonzero().squeeze(1)
        test_idx.append(idx[torch.randperm(len(idx), generator=g)[: int(take[c])]])
    test = torch.zeros(len(y), dtype=torch.bool)
    test[torch.cat(test_idx)] = True
    return x[~test], y[~test], x[test], y[test]
