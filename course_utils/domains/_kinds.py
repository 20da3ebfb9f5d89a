"""Kinds that several chapters' declarations share."""

from __future__ import annotations

import torch

from course_utils.domains import Kind, tensor_kind

F32 = tensor_kind("float32", "float32", lambda t: t.dtype == torch.float32)
F64 = tensor_kind("float64", "float64", lambda t: t.dtype == torch.float64)
BATCHED = tensor_kind("batch>1", "a batch of more than 1", lambda t: t.shape[0] > 1)
BATCH1 = tensor_kind("batch-1", "a batch of 1", lambda t: t.shape[0] == 1)
NONE = Kind("none", "None", lambda v: v is None)
BOOL = tensor_kind("bool", "a bool tensor", lambda t: t.dtype == torch.bool)
INT_TENSOR = tensor_kind("int-tensor", "an integer tensor", lambda t: not t.is_floating_point() and t.dtype != torch.bool)
ONE = Kind("1", "1", lambda v: type(v) is int and v == 1)
MANY = Kind(">1", "more than 1", lambda v: type(v) is int and v > 1)
NEG_INF = tensor_kind("-inf", "with -inf entries", lambda t: t.is_floating_point() and bool(torch.isneginf(t).any()))
