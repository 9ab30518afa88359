"""`kit doctor`: what this host offers for benchmarking, and the fix for each gap.

The package holds, each in its own module:

* :mod:`kit.doctor.findings`: the row every check returns (``Finding``) and the verdict drawn from the rows;
* :mod:`kit.doctor.checks`: the checks of this host (frameworks, torchvision, engine, sensors, governor, TeX, seal
  key, CPU builds) and ``run_checks``, which runs them all;
* :mod:`kit.doctor.downloads`: the dataset download hosts' probe and the datasets' rows;
* :mod:`kit.doctor.drivers`: the one table of NVIDIA driver versions each CUDA release needs and the PyTorch wheel
  that fits a driver (``torch_choice``), used by ``kit doctor``, ``kit selftest`` and the Makefile;
* :mod:`kit.doctor.torch_cpu`: the torch build for a host without an NVIDIA GPU (``cpu_torch_choice``);
* :mod:`kit.doctor.setup_cli`: ``python3 -m kit.doctor torch-index|driver-check`` (:mod:`kit.doctor.__main__`).

Every module imports only the standard library (and kit.errors) at import time, so ``python3 -m kit.doctor`` runs
before the virtual environment exists (the Makefile's ``setup``); what needs more is imported inside the check.
This ``__init__`` imports nothing, so the ``-m`` entry loads only what it uses.
"""
