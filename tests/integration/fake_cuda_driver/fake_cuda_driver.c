/*
 * libcuda.so.1 look-alike for tests/integration/test_cuda_module.py: a
 * driver that answers the osprey program's probe (server/cuda_module.c)
 * with one GPU, so that the program loads its CUDA device module on a host
 * without a GPU. The CUDA runtime inside the module then finds none of the
 * other driver entry points and reports CUDA as unusable: the models run
 * on the CPU. Never installed.
 */
int cuInit(unsigned int flags);
int cuDeviceGetCount(int *count);

int cuInit(unsigned int flags) {
    (void)flags;
    return 0; /* CUDA_SUCCESS */
}

int cuDeviceGetCount(int *count) {
    *count = 1;
    return 0;
}
