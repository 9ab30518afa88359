"""One DistributedDataParallel rank, started by torchrun from ``zoo_dist_torch`` (inside the image).

    python -m torch.distributed.run --standalone --nproc_per_node N -m kit.workloads.zoo_ddp_worker REQ OUT

Every rank trains on its own random batch (seeded by rank); gradients are
all-reduced by DDP (NCCL on GPUs, gloo on CPUs). Rank 0 writes the phase
markers into the trial's markers file and its step times to OUT.
"""

# ruff: noqa: E402  (die_with_parent must run before the slow imports)
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from kit.workloads.common import die_with_parent

# First, before the seconds of importing torch: torchrun starts ranks in their own sessions, so a
# rank must die with torchrun (and torchrun dies with the harness, the harness with the kit).
die_with_parent(parent_cmd="torch.distributed.run")

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from kit.workloads import device as devmod
from kit.workloads import zoo
from kit.workloads.common import Markers
from kit.workloads.torch_env import apply_tf32, device_sync, torch_env
from kit.workloads.zoo_dist_torch import _inputs, train_loop, used_uuids
from kit.workloads.zoo_torch import build


def main(req_path: str, out_path: str) -> None:
    req = json.loads(Path(req_path).read_text(encoding="utf-8"))
    wl, kind = req["workload"], req["kind"]
    rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    if kind == "gpu":
        torch.cuda.set_device(local)
        device = torch.device(f"cuda:{local}")
    else:
        torch.set_num_threads(1)
        device = torch.device("cpu")
    mode = devmod.tf32_mode(req)
    flags = apply_tf32(mode)  # every rank computes in the same precision
    dist.init_process_group("nccl" if kind == "gpu" else "gloo")
    torch.manual_seed(int(req["seed"]))  # the same initial weights on every rank (DDP also broadcasts them)
    model = build(wl["model"], int(wl["num_classes"]), bool(wl["tiny"]), int(wl["seq_len"])).to(device)
    ddp = DistributedDataParallel(model, device_ids=[local] if kind == "gpu" else None)
    x, y = _inputs(wl, int(wl["batch_size"]), int(req["seed"]) * 1000 + rank, device)
    markers = None
    if rank == 0:
        markers = Markers(Path(req["markers"]), sync=lambda: device_sync(device))
    steps = train_loop(ddp, x, y, wl, device, markers, barrier=dist.barrier)
    if rank == 0:
        assert markers is not None
        markers.close()
        env = torch_env(device, devmod.tf32_record(mode, flags["matmul"], flags["conv"], kind == "gpu"), "fp32",
                        conv_dominant=wl["model"] in zoo.VISION, uuids=used_uuids(kind, dist.get_world_size(), req))
        env["world_size"] = dist.get_world_size()
        tmp = Path(out_path + ".tmp")
        tmp.write_text(json.dumps({"steps": steps, "env": env}), encoding="utf-8")
        os.replace(tmp, out_path)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
