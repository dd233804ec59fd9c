/* The fault guard of the chase kernels.
 *
 * A chase kernel follows the pointers stored in its chain.  link_chain wrote
 * them, but the chain lives in a buffer Python can still write (a bytearray,
 * an mmap), so a pointer may have been overwritten since: the walk then
 * leaves the chain.  Validating every pointer before each call would cost a
 * pass over the whole chain per sample, and that pass would itself bring the
 * chain into the caches the sample is measuring.  The kernels that only read
 * through their chain are instead run under this guard: a fault on the way
 * (SIGSEGV, SIGBUS) returns to the caller, which raises ValueError.  A walk
 * that strays into mapped memory only reads it, and the element it stops
 * at then fails the binding's "src is an element of the chain" check.  (A
 * kernel that writes through its chain, chase_ptr_inc, is validated whole
 * before each call instead: see module.c.)
 *
 * The handler is installed around guarded calls only (a reference count:
 * the first call installs it, the last restores what was there, e.g.
 * Python's faulthandler).  A fault on a thread that is not inside a guarded
 * call puts the previous handler back and returns, so the fault repeats
 * there and is reported as before. */
#define _GNU_SOURCE
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stddef.h>
#include <string.h>
#include "core.h"

static __thread sigjmp_buf *volatile guard_target;
static pthread_mutex_t guard_lock = PTHREAD_MUTEX_INITIALIZER;
static int guard_users;
static struct sigaction previous[2];
static const int guarded_signals[2] = {SIGSEGV, SIGBUS};

static void on_fault(int sig, siginfo_t *info, void *context)
{
    (void)context;
    sigjmp_buf *target = guard_target;
    /* Only a fault of the walk itself (si_code > 0: SEGV_MAPERR, BUS_ADRERR
     * ...) means it left its chain.  A SIGSEGV another process sent (kill:
     * SI_USER, tgkill: SI_TKILL, <= 0) is not the chain's doing: the
     * previous disposition is put back and the signal raised again, so the
     * process ends by it as it would without the guard. */
    if (info && info->si_code <= 0) {
        for (int i = 0; i < 2; i++)
            if (guarded_signals[i] == sig)
                sigaction(sig, &previous[i], NULL);
        raise(sig);
        return;
    }
    if (target) {
        guard_target = NULL;
        siglongjmp(*target, 1);
    }
    for (int i = 0; i < 2; i++)
        if (guarded_signals[i] == sig)
            sigaction(sig, &previous[i], NULL);
}

void mfx_guard_install(void)
{
    pthread_mutex_lock(&guard_lock);
    if (guard_users++ == 0) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_fault;
        sa.sa_flags = SA_SIGINFO | SA_NODEFER;
        sigemptyset(&sa.sa_mask);
        for (int i = 0; i < 2; i++)
            sigaction(guarded_signals[i], &sa, &previous[i]);
    }
    pthread_mutex_unlock(&guard_lock);
}

void mfx_guard_remove(void)
{
    pthread_mutex_lock(&guard_lock);
    if (--guard_users == 0)
        for (int i = 0; i < 2; i++)
            sigaction(guarded_signals[i], &previous[i], NULL);
    pthread_mutex_unlock(&guard_lock);
}

void mfx_guard_arm(sigjmp_buf *target)
{
    guard_target = target;
}
