/* The registered kernel tables (MFX_KERNEL_TABLE in core.h): the entries the
 * macro puts in the linker section mfx_kernel_tables, bounded by the symbols
 * the linker defines for it.  Weak, so that a build with no table links
 * (and then has no kernels). */
#include "core.h"

extern const struct mfx_kernel_table *const __start_mfx_kernel_tables[]
    __attribute__((weak, visibility("hidden")));
extern const struct mfx_kernel_table *const __stop_mfx_kernel_tables[]
    __attribute__((weak, visibility("hidden")));

size_t mfx_kernel_tables(const struct mfx_kernel_table *const **tables)
{
    *tables = __start_mfx_kernel_tables;
    if (!__start_mfx_kernel_tables || !__stop_mfx_kernel_tables)
        return 0;
    return (size_t)(__stop_mfx_kernel_tables - __start_mfx_kernel_tables);
}

/* For kernels that touch no caller buffer (the allocation rows). */
void mfx_footprint_none(const struct mfx_args *a, struct mfx_footprint *f)
{
    (void)a;
    (void)f;
}
