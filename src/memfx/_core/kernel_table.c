/* The list of kernel tables.  Adding a kernel file = one line here. */
#include <string.h>
#include "core.h"

const struct mfx_kernel *const mfx_kernel_tables[] = {
    mfx_kernels_chase,
    mfx_kernels_fill,
    mfx_kernels_storefwd,
    mfx_kernels_copy,
    mfx_kernels_prefetch,
    mfx_kernels_sharing,
    mfx_kernels_bandwidth,
    mfx_kernels_layout,
    NULL,
};

/* For kernels that touch no caller buffer (the allocation rows). */
void mfx_footprint_none(const struct mfx_args *a, struct mfx_footprint *f)
{
    (void)a;
    (void)f;
}
