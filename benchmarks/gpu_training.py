"""The GPU figures: bfloat16 SFT and DPO throughput against TRL on a 0.6B model, and the chunked
logprobs' memory win at 8 x 4096 tokens, each printed with the card's name.

    PYTHONPATH=. python benchmarks/gpu_training.py [--steps 20] [--batch-size 32]

Runs, one after the other, `sft_vs_trl.py` and `dpo_vs_trl.py` with `--device cuda --bf16 --model
0.6b` (Qwen3-0.6B's shape, random weights built from a config: both sides hold bfloat16 weights,
same data and settings; each prints tokens/s, model FLOPs utilisation and peak memory per side),
then `logprob_memory.py --device cuda` (chunked vs whole-logits peak memory of a training step,
8 x 4096 tokens). Without a CUDA GPU it says so and exits 0: nothing here runs on a CPU.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("gpu_training needs a CUDA GPU; none here, nothing measured")
        return
    print(f"GPU: {torch.cuda.get_device_name()}")
    common = ["--device", "cuda", "--bf16", "--model", "0.6b", "--no-pin", "--threads", "4"]
    common += ["--steps", str(args.steps), "--warmup-steps", "3", "--batch-size", str(args.batch_size)]
    for script in ("sft_vs_trl.py", "dpo_vs_trl.py"):
        print(f"== {script}", flush=True)
        subprocess.run([sys.executable, str(HERE / script), *common], check=True)
    print("== logprob_memory.py", flush=True)
    subprocess.run([sys.executable, str(HERE / "logprob_memory.py"), "--device", "cuda"], check=True)


if __name__ == "__main__":
    main()
