"""``sitp.backends``: torch.backends' switches, under the same names.

PyTorch scripts set these at the top: ``torch.backends.cuda.matmul.allow_tf32 = True``,
``torch.backends.cudnn.benchmark = True``, and ask ``torch.backends.mps.is_available()``
or ``torch.backends.cpu.get_cpu_capability()``. Each submodule here answers for sitp:

* :mod:`~sitp.backends.cpu`: the vector instruction set sitp's kernels are compiled for,
  in torch's words (``"AVX512"``, ``"AVX2"``, ``"DEFAULT"``);
* :mod:`~sitp.backends.cuda`: the matmul precision switches (TF32, reduced-precision
  reductions). sitp's GPU GEMMs compute in float32 on the CUDA cores, so the switches
  are kept, checked and reported, and change no result;
* :mod:`~sitp.backends.cudnn`, :mod:`~sitp.backends.mkldnn`: libraries sitp does not
  use (it writes its own kernels): ``is_available()`` is False, and their flags are
  kept with no effect;
* :mod:`~sitp.backends.mps`: Apple's GPUs, which sitp does not drive;
* :mod:`~sitp.backends.opt_einsum`: the contraction-order library torch's einsum can
  call; sitp has no einsum, so it is not available.

The kernels themselves are :mod:`sitp.kernels` (the CPU and CUDA backends of chapters
2 and 4).

>>> import sitp
>>> sitp.backends.cudnn.is_available(), sitp.backends.mps.is_available()
(False, False)
>>> sitp.backends.cpu.get_cpu_capability() in ("AVX512", "AVX2", "DEFAULT")
True
"""

from sitp.backends import cpu, cuda, cudnn, mkldnn, mps, opt_einsum

__all__ = ["cpu", "cuda", "cudnn", "mkldnn", "mps", "opt_einsum"]
