/* perf_event plumbing: open counters, read a group, read one counter with
 * rdpmc through its mmap page.  Policy (which events, what to do without a
 * PMU) lives in Python. */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/perf_event.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "core.h"

int mfx_perf_open(uint32_t type, uint64_t config, int group_fd, int pinned_cpu_only)
{
    struct perf_event_attr attr;
    memset(&attr, 0, sizeof attr);
    attr.size = sizeof attr;
    attr.type = type;
    attr.config = config;
    attr.disabled = group_fd < 0;   /* the leader starts disabled; members follow it */
    attr.exclude_kernel = 0;        /* page faults and switches happen in the kernel */
    attr.exclude_hv = 1;
    attr.read_format = PERF_FORMAT_GROUP | PERF_FORMAT_TOTAL_TIME_ENABLED |
                       PERF_FORMAT_TOTAL_TIME_RUNNING;
    (void)pinned_cpu_only;
    /* pid 0 = this thread, cpu -1 = wherever it runs */
    long fd = syscall(SYS_perf_event_open, &attr, 0, -1, group_fd, PERF_FLAG_FD_CLOEXEC);
    return fd < 0 ? -errno : (int)fd;
}

int mfx_perf_read_group(int leader_fd, struct mfx_perf_sample *out)
{
    /* Layout for PERF_FORMAT_GROUP|TOTAL_TIME_ENABLED|TOTAL_TIME_RUNNING:
     * nr, time_enabled, time_running, value[nr]  (perf_event_open(2)). */
    uint64_t buf[3 + MFX_PERF_MAX];
    ssize_t got = read(leader_fd, buf, sizeof buf);
    if (got < (ssize_t)(3 * sizeof(uint64_t)))
        return got < 0 ? -errno : -EIO;
    uint64_t nr = buf[0];
    if (nr > MFX_PERF_MAX)
        return -E2BIG;
    out->n = (int)nr;
    out->time_enabled = buf[1];
    out->time_running = buf[2];
    for (uint64_t i = 0; i < nr; i++)
        out->value[i] = buf[3 + i];
    return 0;
}

/* Read a counter from user space (perf_event_open(2), "rdpmc" and the
 * perf_event_mmap_page seqlock).  Returns 0 and the value, or -1 when the
 * kernel does not allow rdpmc for this event (caller falls back to read()). */
int mfx_perf_rdpmc(const volatile struct perf_event_mmap_page *pc, uint64_t *value)
{
    uint32_t seq, idx;
    uint64_t count;
    do {
        seq = pc->lock;
        __asm__ __volatile__("" ::: "memory");
        idx = pc->index;
        count = pc->offset;
        if (!pc->cap_user_rdpmc || idx == 0)
            return -1;
        uint32_t lo, hi;
        __asm__ __volatile__("rdpmc" : "=a"(lo), "=d"(hi) : "c"(idx - 1));
        uint64_t pmc = ((uint64_t)hi << 32) | lo;
        /* Sign-extend from pmc_width bits so a wrapped raw counter adds
         * correctly to the kernel's offset. */
        unsigned width = pc->pmc_width;
        if (width > 0 && width < 64) {
            pmc <<= 64 - width;
            pmc = (uint64_t)((int64_t)pmc >> (64 - width));
        }
        count += pmc;
        __asm__ __volatile__("" ::: "memory");
    } while (pc->lock != seq);
    *value = count;
    return 0;
}
