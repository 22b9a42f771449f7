"""benchmarks/bench_local.py's GPU summary: the bf16 peak by device name, MFU and peak GPU memory
from the batched runs (hand values), null on CPU."""

import pytest

from benchmarks.bench_local import bf16_peak_tflops, gpu_summary


@pytest.mark.parametrize("gpu, want", [
    ("NVIDIA H100 80GB HBM3", 989.0), ("NVIDIA H100 PCIe", 756.0), ("NVIDIA H200", 989.0),
    ("NVIDIA GeForce RTX 4090", None), (None, None),
])
def test_bf16_peak_by_device_name(gpu, want):
    assert bf16_peak_tflops(gpu) == want


def test_gpu_summary_mfu_and_peak_memory():
    runs = [{"matmul_gflops": g, "peak_gpu_gb": m, "gpu": "NVIDIA H200"} for g, m in [(400e3, 30.5), (300e3, 31.0), (350e3, 29.0)]]
    # median 350 TFLOP/s of matrix products over the H200's 989: 0.354
    assert gpu_summary(runs) == {"peak_gpu_gb": 31.0, "gpu": "NVIDIA H200", "peak_tflops": 989.0, "mfu": 0.354}
    cpu = [{"matmul_gflops": 50.0, "peak_rss_gb": 1.2}]
    assert gpu_summary(cpu) == {"peak_gpu_gb": None, "gpu": None, "peak_tflops": None, "mfu": None}
