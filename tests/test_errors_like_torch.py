"""Errors like torch's: each case runs under torch and under sitp; sitp must raise the same
exception type (shape, broadcast, view and dtype mismatches: RuntimeError; out-of-range
indices and dims: IndexError; wrong argument types: TypeError), and its message must name
the shapes, dims or indices involved (the ``names`` column)."""

import numpy as np
import pytest
import torch

import sitp

TF = torch.nn.functional


def F(lib):
    return lib.nn.functional


# name: (case taking the library, strings the message must contain)
CASES = {
    # broadcasting
    "add_broadcast": (lambda L: L.ones(2, 3) + L.ones(4), ["(2, 3)", "(4,)"]),
    "mul_broadcast": (lambda L: L.ones(2, 3) * L.ones(3, 2), ["3", "2"]),
    "where_broadcast": (lambda L: L.where(L.ones(2, 3) > 0, L.ones(2, 3), L.ones(4)), ["3", "4"]),
    "inplace_broadcast": (lambda L: L.ones(3).add_(L.ones(2, 3)), ["(3", "(2, 3)"]),
    "expand_bad": (lambda L: L.ones(2, 3).expand(4, 3), ["2", "4"]),
    "masked_fill_shape": (
        lambda L: L.ones(2, 3).masked_fill(L.ones(4, dtype=L.bool), 0.0),
        ["3", "4"],
    ),
    # shapes and views
    "reshape_numel": (lambda L: L.ones(2, 3).reshape(4, 2), ["[4, 2]", "6"]),
    "view_numel": (lambda L: L.ones(2, 3).view(7), ["[7]", "6"]),
    "view_two_minus1": (lambda L: L.ones(6).view(-1, -1), ["-1"]),
    "view_noncontig": (lambda L: L.ones(2, 3).t().view(6), ["view"]),
    "matmul_inner": (lambda L: L.ones(2, 3) @ L.ones(4, 5), ["(2, 3)", "(4, 5)"]),
    "matmul_batch": (lambda L: L.ones(2, 2, 3) @ L.ones(3, 3, 4), ["2", "3"]),
    "mm_vector": (lambda L: L.ones(3) @ L.ones(4), ["3", "4"]),
    "cat_shapes": (lambda L: L.cat([L.ones(2, 3), L.ones(2, 4)]), ["3", "4"]),
    "stack_shapes": (lambda L: L.stack([L.ones(2), L.ones(3)]), ["(2,)", "(3,)"]),
    "permute_dims": (lambda L: L.ones(2, 3).permute(0, 0), ["(0, 0)"]),
    "linear_shapes": (lambda L: F(L).linear(L.ones(2, 3), L.ones(4, 5)), ["(2, 3)", "(4, 5)"]),
    "cross_entropy_batch": (
        lambda L: F(L).cross_entropy(L.ones(3, 5), L.zeros(2, dtype=L.long)),
        ["3", "2"],
    ),
    # dtypes
    "gather_index_dtype": (lambda L: L.ones(2, 3).gather(1, L.zeros(2, 1)), ["int64"]),
    "requires_grad_int": (lambda L: L.ones(3, dtype=L.long).requires_grad_(), ["floating point"]),
    "matmul_dtypes": (
        lambda L: L.ones(2, 3) @ L.ones(3, 2, dtype=L.float64),
        ["float32", "float64"],
    ),
    "cross_entropy_float_target": (lambda L: F(L).cross_entropy(L.ones(3, 5), L.ones(3)), []),
    # indices and dims
    "index_out_of_range": (lambda L: L.ones(2, 3)[5], ["5", "0", "2"]),
    "index_negative": (lambda L: L.ones(2, 3)[-3], ["-3"]),
    "index_dim1": (lambda L: L.ones(2, 3)[0, 3], ["3"]),
    "too_many_indices": (lambda L: L.ones(2, 3)[0, 0, 0], ["dimension 2"]),
    "tensor_index_oob": (lambda L: L.ones(2, 3)[L.tensor([0, 7])], ["7"]),
    "setitem_oob": (lambda L: L.ones(3).__setitem__(4, 1.0), ["4"]),
    "sum_dim": (lambda L: L.ones(2, 3).sum(2), ["2", "-2", "1"]),
    "softmax_dim": (lambda L: L.ones(2, 3).softmax(5), ["5"]),
    "size_dim": (lambda L: L.ones(2, 3).size(3), ["3"]),
    "transpose_dim": (lambda L: L.ones(2, 3).transpose(0, 4), ["4"]),
    "unsqueeze_dim": (lambda L: L.ones(2, 3).unsqueeze(4), ["4"]),
    "gather_index_oob": (lambda L: L.ones(2, 3).gather(1, L.tensor([[3], [0]])), ["3"]),
    "cross_entropy_target_oob": (
        lambda L: F(L).cross_entropy(L.ones(2, 5), L.tensor([0, 5])),
        ["5"],
    ),
    "embedding_oob": (lambda L: F(L).embedding(L.tensor([4]), L.ones(3, 2)), ["index"]),
    "item_of_many": (lambda L: L.ones(3).item(), ["3"]),
    # argument types
    "add_str": (lambda L: L.ones(2) + "a", []),
    "tensor_of_str": (lambda L: L.tensor("abc"), []),
    "reshape_float": (lambda L: L.ones(4).reshape(2.0, 2), []),
    "len_0d": (lambda L: len(L.tensor(1.0)), ["0-d"]),
    "iter_0d": (lambda L: iter(L.tensor(1.0)), ["0-d"]),
    "sum_str_dim": (lambda L: L.ones(2).sum("a"), []),
    "inplace_dtype": (lambda L: L.ones(3, dtype=L.long).add_(L.ones(3) * 0.5), ["int64"]),
    "float_index": (lambda L: L.ones(3)[L.tensor([0.0])], []),
    "cat_dim_oob": (lambda L: L.cat([L.ones(2), L.ones(2)], dim=3), ["3"]),
    "unbind_dim_oob": (lambda L: L.ones(2).unbind(2), ["2"]),
    "narrow_oob": (lambda L: L.ones(3).narrow(0, 2, 5), ["5"]),
    "ragged_list": (lambda L: L.tensor([[1, 2], [3]]), []),
    "mse_loss_shapes": (lambda L: F(L).mse_loss(L.ones(3), L.ones(4)), ["3", "4"]),
    "layer_norm_shape": (lambda L: F(L).layer_norm(L.ones(2, 3), (4,)), ["4"]),
    "embedding_float_idx": (lambda L: F(L).embedding(L.tensor([0.5]), L.ones(3, 2)), []),
    "split_dim_oob": (lambda L: L.ones(4).split(2, dim=1), ["1"]),
    "squeeze_dim_oob": (lambda L: L.ones(2, 1).squeeze(3), ["3"]),
    "index_select_oob": (lambda L: L.ones(2, 3).index_select(1, L.tensor([5])), ["5"]),
    "index_select_float": (lambda L: L.ones(2, 3).index_select(1, L.tensor([0.0])), []),
    "mul_int_by_float": (lambda L: L.ones(3, dtype=L.long).mul_(0.5), ["int64"]),
    "bool_add_int": (lambda L: L.ones(3, dtype=L.bool).add_(L.ones(3, dtype=L.long)), ["bool"]),
    # gradients
    "backward_non_scalar": (lambda L: L.ones(2, requires_grad=True).mul(2).backward(), ["scalar"]),
    "backward_no_grad": (lambda L: L.ones(2).sum().backward(), ["grad"]),
    "leaf_inplace": (lambda L: L.ones(2, requires_grad=True).add_(1), ["leaf"]),
    # settings
    "set_num_threads_zero": (lambda L: L.set_num_threads(0), ["positive integer"]),
}


def _raised(case, lib):
    try:
        case(lib)
    except Exception as e:  # noqa: BLE001 - the type is compared
        return type(e), str(e)
    return None, None


@pytest.mark.parametrize("name", sorted(CASES))
def test_same_exception_type_as_torch(name):
    case, names = CASES[name]
    t_type, t_msg = _raised(case, torch)
    assert t_type is not None, f"torch raises nothing for {name}: drop the case"
    s_type, s_msg = _raised(case, sitp)
    # torch raises builtin types, or its own subclasses of them (torch.OutOfMemoryError...)
    expected = next(k for k in t_type.__mro__ if k.__module__ == "builtins")
    assert s_type is not None, f"sitp raised nothing; torch: {t_type.__name__}: {t_msg}"
    assert issubclass(s_type, expected), (
        f"sitp: {s_type.__name__}: {s_msg}\ntorch: {t_type.__name__}: {t_msg}"
    )
    for s in names:
        assert s in s_msg, f"{s!r} not in sitp's message {s_msg!r} (torch: {t_msg!r})"


# what torch accepts, sitp must accept too (the checks above must not over-reach)
ACCEPTED = {
    "float_add_double_inplace": lambda L: L.ones(3).add_(L.ones(3, dtype=L.float64)),
    "float_add_int_inplace": lambda L: L.ones(3).add_(L.ones(3, dtype=L.long)),
    "int_add_int_inplace": lambda L: L.ones(3, dtype=L.long).add_(2),
    "copy_float_into_int": lambda L: L.zeros(3, dtype=L.long).copy_(L.ones(3) * 2.5),
    "narrow_negative_start": lambda L: L.ones(4).narrow(0, -2, 2),
    "narrow_empty_at_end": lambda L: L.ones(4).narrow(0, 4, 0),
    "reshape_numpy_ints": lambda L: L.ones(4).reshape(np.int64(2), 2),
    "broadcast_ok": lambda L: L.ones(2, 1) + L.ones(3),
}


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_accepted_like_torch(name):
    t = ACCEPTED[name](torch)
    s = ACCEPTED[name](sitp)
    np.testing.assert_array_equal(s.numpy(), t.numpy())
