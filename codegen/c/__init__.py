"""The CPU backend: C kernels with OpenMP and SIMD, generated from the kernel IR."""
