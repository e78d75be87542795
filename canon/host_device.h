// The qualifier of every function of the canon: host and device (forced inline) under nvcc,
// inline elsewhere.
#ifndef SDM_P1_CANON_HOST_DEVICE_H
#define SDM_P1_CANON_HOST_DEVICE_H

#include <stdint.h>

#if defined(__CUDACC__)
#define SDM_HD __host__ __device__ __forceinline__
#else
#define SDM_HD inline
#endif

#endif   // SDM_P1_CANON_HOST_DEVICE_H
