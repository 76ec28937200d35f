"""Arrays in: zero-copy views of float32 memory, conversions otherwise, PyTorch through DLPack."""

import subprocess
import sys

import numpy as np
import pytest

import repgeom
from repgeom import _native


def info(x):
    addr, copied, dtype = _native.input_info(x)
    return addr, copied, dtype


@pytest.mark.parametrize("order", ["C", "F"])
def test_float32_is_viewed_in_place(acts, order):
    a = np.array(acts[0], order=order)
    assert info(a) == (a.ctypes.data, False, "float32")


def test_strided_float32_and_layer_slices_are_views(acts):
    a = np.ascontiguousarray(acts)
    assert info(a[1]) == (a.ctypes.data + a.strides[0], False, "float32")
    s = a[0, ::2, ::3]
    assert info(s) == (s.ctypes.data, False, "float32")


@pytest.mark.parametrize("dtype", [np.float16, np.float64])
def test_other_floats_are_converted_once(acts, dtype):
    _, copied, name = info(acts[0].astype(dtype))
    assert copied and name == np.dtype(dtype).name


def test_layouts_and_precisions_give_the_cli_numbers(acts, readout, null):
    ref = repgeom.pga(acts[0], readout, k=8, null_bases=null, progress=False)
    for a in [np.asfortranarray(acts[0]), acts[0].astype(np.float64), acts.transpose(1, 2, 0).copy().transpose(2, 0, 1)[0]]:
        assert repgeom.pga(a, readout, k=8, null_bases=null, progress=False) == ref
    # W_U as float64 or Fortran order reads the same f32 values.
    assert repgeom.pga(acts[0], np.asfortranarray(readout.astype(np.float64)), k=8, null_bases=null, progress=False) == ref


def test_module_import_does_not_import_torch():
    code = "import sys, repgeom; assert 'torch' not in sys.modules, 'torch imported at load'"
    subprocess.run([sys.executable, "-c", code], check=True)


class FakeCudaTensor:
    """Just enough of a CUDA tensor's DLPack surface: the device check must come first."""

    shape = (8, 4)
    ndim = 2

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, **kwargs):  # pragma: no cover - must not be reached
        raise AssertionError("__dlpack__ called on a CUDA tensor")


def test_cuda_tensors_get_a_clear_error(readout):
    with pytest.raises(repgeom.InvalidInputError, match=r"cuda:0.*\.cpu\(\)"):
        repgeom.pga(FakeCudaTensor(), readout, k=2, progress=False)


def test_torch_float32_is_viewed_in_place(acts):
    torch = pytest.importorskip("torch")
    t = torch.from_numpy(acts[0].copy())
    assert info(t) == (t.data_ptr(), False, "float32")
    tt = t.t()  # non-contiguous: still a strided view
    assert info(tt) == (tt.data_ptr(), False, "float32")


def test_torch_bf16_and_non_contiguous_tensors(acts, readout, null):
    torch = pytest.importorskip("torch")
    t = torch.from_numpy(acts.copy()).to(torch.bfloat16)
    _, copied, name = info(t[0])
    assert copied and name == "bfloat16"
    got = repgeom.pga(t, readout, k=8, null_bases=null, progress=False)
    want = repgeom.pga(t.float().numpy(), readout, k=8, null_bases=null, progress=False)
    assert got.to_dicts() == want.to_dicts()
    # A transposed view (non-contiguous) and a tensor that requires grad.
    x = torch.from_numpy(np.ascontiguousarray(acts[1].T)).t()
    assert not x.is_contiguous()
    ref = repgeom.pga(acts[1], readout, k=8, null_bases=null, progress=False)
    assert repgeom.pga(x, readout, k=8, null_bases=null, progress=False) == ref
    g = torch.from_numpy(acts[1].copy()).requires_grad_(True)
    assert repgeom.pga(g, torch.from_numpy(readout), k=8, null_bases=null, progress=False) == ref
