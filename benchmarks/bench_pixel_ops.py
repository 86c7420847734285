"""The pixel ops' cost: median ms per 64x224x224 batch per op, native vs the Pillow reference.

Each round times every op once on every path, interleaved, on the same photo-like batch (a fresh
copy each time; the copy is outside the timing); the table gives the median over rounds and the
reference/native ratio measured in the same rounds. Paths: native (`_core.apply_pixel_program`,
1 thread and --threads threads; and 1 thread on the scalar kernels, the AVX2 ones turned off
through `_core.pixel_set_simd`, where the CPU has them), the reference (Pillow, per sample), and
the device path on the CPU device (`apply_program_torch`, NCHW). The policies run drawn programs
(different ops per sample), the single ops fixed parameters on every sample. draw_program's cost
is reported too. Writes benchmarks/results/pixel_ops.jsonl (--out).
Usage: python benchmarks/bench_pixel_ops.py [--rounds 5 --batch 64 --size 224 --threads 2]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import numpy as np
import torch

from fastloader.decode import _native
from fastloader.decode import pixels as P
from fastloader.decode.pixels import codes as C
from fastloader.gpu.pixel_program import apply_program_torch
from harness import RESULTS_DIR, JsonlWriter, env_line, environment, format_table, summarize

FIXED = {  # code: p0 (ERASE's box is set below)
    C.BRIGHTNESS: 1.3, C.CONTRAST: 0.7, C.SATURATION: 1.5, C.HUE: 0.1, C.GRAYSCALE: 0,
    C.BLUR: 1.0, C.SOLARIZE: 128, C.POSTERIZE: 4, C.AUTOCONTRAST: 0, C.EQUALIZE: 0, C.ERASE: 0,
    C.SHARPNESS: 1.5, C.INVERT: 0, C.SHEAR_X: 0.3, C.TRANSLATE_X: 10, C.ROTATE: 30,
}
SCALAR = "native 1 thread, scalar kernels"
DRAWN = {
    "ColorJitter(0.4, 0.4, 0.2, 0.1)": [P.ColorJitter(0.4, 0.4, 0.2, 0.1)],
    "GaussianBlur(sigma=(0.1, 2.0))": [P.GaussianBlur(sigma=(0.1, 2.0))],
    "TrivialAugmentWide()": [P.TrivialAugmentWide()],
    "RandAugment(2, 9)": [P.RandAugment(2, 9)],
    "AutoAugment('imagenet')": [P.AutoAugment()],
    "RandomErasing(p=1)": [P.RandomErasing(p=1.0)],
}


def photo_batch(n: int, size: int) -> np.ndarray:
    """Photo-like images: smooth gradients, edges and noise (as tests/imagegen.py makes)."""
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32)
    images = np.empty((n, size, size, 3), np.uint8)
    for k in range(n):
        planes = [128 + 80 * np.sin(yy * rng.uniform(0.005, 0.04) + xx * rng.uniform(0.005, 0.04)
                                    + rng.uniform(0, 6)) for _ in range(3)]
        image = np.stack(planes, axis=2) + rng.normal(0, 4, (size, size, 3))
        images[k] = np.clip(image, 0, 255).astype(np.uint8)
    return images


def fixed_program(code: int, n: int, size: int) -> P.PixelProgram:
    params = np.zeros((n, 1, 8), np.float32)
    params[:, 0, 0] = FIXED[code]
    if code == C.ERASE:
        params[:, 0, :7] = (size // 4, size // 5, size // 3, size // 2, 124, 116, 104)
    return P.PixelProgram(np.full((n, 1), code, np.int32), params)


def timed(call: Callable[..., object], *args: object) -> float:
    """Milliseconds call(*args) took."""
    start = time.perf_counter()
    call(*args)
    return (time.perf_counter() - start) * 1e3


def scalar_kernels(core: ModuleType, images: np.ndarray, program: P.PixelProgram) -> None:
    """The program on 1 thread with the AVX2 pixel kernels turned off (the same bytes)."""
    old = core.pixel_set_simd(False)
    try:
        core.apply_pixel_program(images, program.codes, program.params, 1)
    finally:
        core.pixel_set_simd(old)


def paths(threads: int, torch_cpu: bool) -> dict[str, Callable[[np.ndarray, P.PixelProgram],
                                                                 object]]:
    """The timed paths by name (the device path on the CPU device when torch_cpu)."""
    core = _native.require_native()
    ways: dict[str, Callable[[np.ndarray, P.PixelProgram], object]] = {
        "native 1 thread": lambda x, p: core.apply_pixel_program(x, p.codes, p.params, 1),
        f"native {threads} threads": lambda x, p: core.apply_pixel_program(
            x, p.codes, p.params, threads),
        "Pillow reference": P.apply_program_reference,
    }
    if core.pixel_simd():
        ways[SCALAR] = lambda x, p: scalar_kernels(core, x, p)
    if torch_cpu:
        ways["torch, CPU device"] = lambda x, p: apply_program_torch(x, p)
    return ways


def measure(args: argparse.Namespace, programs: dict[str, P.PixelProgram]
            ) -> dict[tuple[str, str], list[float]]:
    """ms per batch, for every (program, path), over interleaved rounds."""
    images = photo_batch(args.batch, args.size)
    nchw = torch.from_numpy(images).permute(0, 3, 1, 2).contiguous()
    ways = paths(args.threads, args.torch_cpu)
    times: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.rounds):
        for name, program in programs.items():
            for way, call in ways.items():
                batch = nchw.clone() if way.startswith("torch") else images.copy()
                times.setdefault((name, way), []).append(timed(call, batch, program))
    return times


def run(args: argparse.Namespace) -> None:
    keys = np.arange(args.batch)
    programs = {C.NAMES[code]: fixed_program(code, args.batch, args.size) for code in FIXED}
    programs.update({name: P.draw_program(ops, 0, 0, keys, 0, args.size, args.size)
                     for name, ops in DRAWN.items()})
    times = measure(args, programs)
    with JsonlWriter(args.out, "bench_pixel_ops") as writer:
        for (name, way), runs in times.items():
            writer.write({"kind": "summary", "name": name, "path": way, "batch": args.batch,
                          "size": args.size, "ms": summarize(runs), "runs_ms": runs})
    recipe = DRAWN["RandAugment(2, 9)"] + DRAWN["ColorJitter(0.4, 0.4, 0.2, 0.1)"]
    draw_ms = [timed(P.draw_program, recipe, 0, epoch, np.arange(256), 0, 224, 224)
               for epoch in range(20)]
    ways = list(paths(args.threads, args.torch_cpu))
    # per-round ratios against native 1 thread: Pillow's, and the scalar kernels' where timed
    against = [way for way in ("Pillow reference", SCALAR) if way in ways]
    rows = []
    for name in programs:
        medians = [statistics.median(times[(name, way)]) for way in ways]
        ratios = [statistics.median(r / n for r, n in zip(times[(name, way)],
                                                          times[(name, "native 1 thread")],
                                                          strict=True)) for way in against]
        rows.append([name, *(f"{m:.1f}" for m in medians), *(f"{r:.1f}x" for r in ratios)])
    print(f"median ms per {args.batch}x{args.size}x{args.size} batch over {args.rounds} rounds")
    heads = ["reference / native 1 thread", "scalar / AVX2 kernels"][:len(against)]
    print(format_table(["op", *ways, *heads], rows))
    print(f"draw_program (RandAugment + ColorJitter), 256 samples: "
          f"{statistics.median(draw_ms):.2f} ms median")
    print(env_line(environment()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--torch-cpu", action=argparse.BooleanOptionalAction, default=True,
                        help="also time apply_program_torch on the CPU device")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "pixel_ops.jsonl")
    run(parser.parse_args())


if __name__ == "__main__":
    main()
