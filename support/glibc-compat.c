// Local definitions of the C library functions that the build machine's headers, libstdc++ and
// libgcc reach for but that glibc 2.17 does not export. Linked into ./bankml only, together with
// the stub libraries of scripts/glibc-stubs.sh (see docs/modules/build.md). Each definition is
// built from calls that glibc 2.17 has, and stays only as long as the build machine's glibc has the
// newer symbol: built against an older glibc, the block drops out.
#define _GNU_SOURCE 1
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

// ---- Program start: __libc_start_main's pre-2.34 contract ----------------------------------------
// glibc 2.34's crt1 passes no init function, because 2.34's __libc_start_main runs the program's
// constructors itself. Before 2.34 the init argument ran them (__libc_csu_init, from the static part
// of the C library), and with a null one no constructor runs. The link wraps the call (ld --wrap), so
// crt1's call lands here and goes on to __libc_start_main@GLIBC_2.2.5 with an init that does what
// __libc_csu_init did: _init, then the init array (the loader runs the preinit array itself).
// Every glibc since 2.34 still calls a non-null init instead of its own constructor walk.
extern void (*__init_array_start[])(int, char**, char**) __attribute__((visibility("hidden")));
extern void (*__init_array_end[])(int, char**, char**) __attribute__((visibility("hidden")));
extern void _init(void);

static void bankml_run_constructors(int argc, char** argv, char** envp) {
    _init();
    size_t n = (size_t)(__init_array_end - __init_array_start);
    for (size_t i = 0; i < n; i++) __init_array_start[i](argc, argv, envp);
}

typedef int (*bankml_main_fn)(int, char**, char**);
int __real___libc_start_main(bankml_main_fn main, int argc, char** argv, void (*init)(int, char**, char**),
                             void (*fini)(void), void (*rtld_fini)(void), void* stack_end);

int __wrap___libc_start_main(bankml_main_fn main, int argc, char** argv, void (*init)(int, char**, char**),
                             void (*fini)(void), void (*rtld_fini)(void), void* stack_end) {
    (void)init;  // null from a 2.34+ crt1; __libc_csu_init from an older one, which does the same
    return __real___libc_start_main(main, argc, argv, bankml_run_constructors, fini, rtld_fini, stack_end);
}

// ---- glibc 2.18: __cxa_thread_atexit_impl --------------------------------------------------------
// libstdc++ registers the destructors of thread_local objects here. The same scheme libstdc++ uses on
// a C library without it: a per-thread list, run by a pthread key's destructor when a thread ends and
// by an atexit handler for the thread that calls exit. The executable is never unloaded, so the
// handle that keeps a library loaded while its destructors are pending is not needed.
#if __GLIBC_PREREQ(2, 18)
struct bankml_tls_dtor {
    void (*fn)(void*);
    void* obj;
    struct bankml_tls_dtor* next;
};
static pthread_key_t bankml_tls_key;
static pthread_once_t bankml_tls_once = PTHREAD_ONCE_INIT;

static void bankml_tls_run(void* list) {
    struct bankml_tls_dtor* e = (struct bankml_tls_dtor*)list;
    while (e) {  // newest first, as glibc does
        struct bankml_tls_dtor* next = e->next;
        e->fn(e->obj);
        free(e);
        e = next;
    }
}

static void bankml_tls_run_at_exit(void) {
    void* list = pthread_getspecific(bankml_tls_key);
    pthread_setspecific(bankml_tls_key, NULL);
    bankml_tls_run(list);
}

static void bankml_tls_init(void) {
    if (pthread_key_create(&bankml_tls_key, bankml_tls_run) != 0) abort();
    atexit(bankml_tls_run_at_exit);
}

int __cxa_thread_atexit_impl(void (*fn)(void*), void* obj, void* dso) {
    (void)dso;
    pthread_once(&bankml_tls_once, bankml_tls_init);
    struct bankml_tls_dtor* e = (struct bankml_tls_dtor*)malloc(sizeof *e);
    if (!e) return -1;
    e->fn = fn;
    e->obj = obj;
    e->next = (struct bankml_tls_dtor*)pthread_getspecific(bankml_tls_key);
    return pthread_setspecific(bankml_tls_key, e) == 0 ? 0 : -1;
}
#endif

// ---- glibc 2.25: getentropy -------------------------------------------------------------------
// std::random_device's "getentropy" source. Same contract: at most 256 bytes, all or an error.
#if __GLIBC_PREREQ(2, 25)
static int bankml_random_bytes(unsigned char* p, size_t n) {
    while (n > 0) {
        long got = syscall(SYS_getrandom, p, n, 0);
        if (got > 0) { p += got; n -= (size_t)got; continue; }
        if (got < 0 && errno == EINTR) continue;
        // Linux before 3.17 has no getrandom: the same bytes from /dev/urandom.
        int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
        if (fd < 0) return -1;
        while (n > 0) {
            ssize_t r = read(fd, p, n);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) { close(fd); errno = EIO; return -1; }
            p += r;
            n -= (size_t)r;
        }
        close(fd);
    }
    return 0;
}

int getentropy(void* buf, size_t n) {
    if (n > 256) { errno = EIO; return -1; }
    return bankml_random_bytes((unsigned char*)buf, n);
}
#endif

// ---- glibc 2.32: __libc_single_threaded ---------------------------------------------------------
// libstdc++ skips atomic reference counting while this reads nonzero. Zero always is the answer that
// is never wrong: the program takes the atomic path even before its first thread.
#if __GLIBC_PREREQ(2, 32)
char __libc_single_threaded = 0;
#endif

// ---- glibc 2.33: stat, fstat, lstat, fstatat as functions -----------------------------------------
// Before 2.33 the headers turned them into calls of __xstat and friends with a version argument
// (_STAT_VER, 1 on x86-64), which every later glibc still exports.
#if __GLIBC_PREREQ(2, 33)
#define BANKML_STAT_VER 1
int __xstat(int, const char*, struct stat*);
int __fxstat(int, int, struct stat*);
int __lxstat(int, const char*, struct stat*);
int __fxstatat(int, int, const char*, struct stat*, int);
int stat(const char* path, struct stat* st) { return __xstat(BANKML_STAT_VER, path, st); }
int fstat(int fd, struct stat* st) { return __fxstat(BANKML_STAT_VER, fd, st); }
int lstat(const char* path, struct stat* st) { return __lxstat(BANKML_STAT_VER, path, st); }
int fstatat(int dirfd, const char* path, struct stat* st, int flags) {
    return __fxstatat(BANKML_STAT_VER, dirfd, path, st, flags);
}
// On x86-64 struct stat64 is struct stat.
int stat64(const char* path, struct stat64* st) { return __xstat(BANKML_STAT_VER, path, (struct stat*)st); }
int fstat64(int fd, struct stat64* st) { return __fxstat(BANKML_STAT_VER, fd, (struct stat*)st); }
int lstat64(const char* path, struct stat64* st) { return __lxstat(BANKML_STAT_VER, path, (struct stat*)st); }
int fstatat64(int dirfd, const char* path, struct stat64* st, int flags) {
    return __fxstatat(BANKML_STAT_VER, dirfd, path, (struct stat*)st, flags);
}
#endif

// ---- glibc 2.35: _dl_find_object -------------------------------------------------------------------
// libgcc's unwinder, built against 2.35+, finds a frame's unwind table only through this call (no
// fallback), so C++ exceptions need it. The same answer from dl_iterate_phdr: the object whose
// loaded segments hold the address, and its PT_GNU_EH_FRAME.
#ifdef DLFO_STRUCT_HAS_EH_DBASE
struct bankml_dlfo_query {
    uintptr_t pc;
    struct dl_find_object* out;
    int found;
};

static int bankml_dlfo_visit(struct dl_phdr_info* info, size_t size, void* data) {
    (void)size;
    struct bankml_dlfo_query* q = (struct bankml_dlfo_query*)data;
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    int hit = 0;
    const void* eh = NULL;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr)* ph = &info->dlpi_phdr[i];
        uintptr_t start = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type == PT_LOAD) {
            if (start < lo) lo = start;
            if (start + ph->p_memsz > hi) hi = start + ph->p_memsz;
            if (q->pc >= start && q->pc < start + ph->p_memsz) hit = 1;
        } else if (ph->p_type == PT_GNU_EH_FRAME) {
            eh = (const void*)start;
        }
    }
    if (!hit) return 0;
    q->out->dlfo_flags = 0;
    q->out->dlfo_map_start = (void*)lo;
    q->out->dlfo_map_end = (void*)hi;
    q->out->dlfo_link_map = NULL;
    q->out->dlfo_eh_frame = (void*)eh;
#if DLFO_STRUCT_HAS_EH_DBASE
    q->out->dlfo_eh_dbase = NULL;
#endif
#if DLFO_STRUCT_HAS_EH_COUNT
    q->out->dlfo_eh_count = 0;
#endif
    q->found = 1;
    return 1;
}

int _dl_find_object(void* pc, struct dl_find_object* result) {
    struct bankml_dlfo_query q = {(uintptr_t)pc, result, 0};
    dl_iterate_phdr(bankml_dlfo_visit, &q);
    return q.found ? 0 : -1;
}
#endif

// ---- glibc 2.30: pthread_cond_clockwait --------------------------------------------------------
// libstdc++'s condition_variable waits on the steady clock with it (wait_for, wait_until). The
// 2.17 call waits for a CLOCK_REALTIME deadline: the steady deadline becomes the same distance
// from now on that clock (a wall-clock step during the wait moves its end, as before 2.30).
#if __GLIBC_PREREQ(2, 30)
int pthread_cond_clockwait(pthread_cond_t* cond, pthread_mutex_t* mutex, clockid_t clock, const struct timespec* at) {
    if (clock == CLOCK_REALTIME) return pthread_cond_timedwait(cond, mutex, at);
    struct timespec now, wall;
    if (clock_gettime(clock, &now) != 0 || clock_gettime(CLOCK_REALTIME, &wall) != 0) return EINVAL;
    long long ns = (long long)(at->tv_sec - now.tv_sec) * 1000000000LL + (at->tv_nsec - now.tv_nsec);
    if (ns < 0) ns = 0;
    long long end = (long long)wall.tv_nsec + ns % 1000000000LL;
    struct timespec deadline = {wall.tv_sec + (time_t)(ns / 1000000000LL) + (time_t)(end / 1000000000LL),
                                (long)(end % 1000000000LL)};
    return pthread_cond_timedwait(cond, mutex, &deadline);
}
#endif

// ---- glibc 2.36: arc4random ------------------------------------------------------------------------
// std::random_device's default source in a libstdc++ built against 2.36+. The kernel's getrandom
// through syscall(), since the getrandom wrapper is 2.25; arc4random cannot fail, so this aborts
// if neither getrandom nor /dev/urandom answers.
#if __GLIBC_PREREQ(2, 36)
void arc4random_buf(void* buf, size_t n) {
    if (bankml_random_bytes((unsigned char*)buf, n) != 0) abort();
}

uint32_t arc4random(void) {
    uint32_t v;
    arc4random_buf(&v, sizeof v);
    return v;
}

uint32_t arc4random_uniform(uint32_t bound) {
    if (bound < 2) return 0;
    uint32_t floor = (uint32_t)(-bound) % bound;  // reject the low values that would bias the modulo
    for (;;) {
        uint32_t v = arc4random();
        if (v >= floor) return v % bound;
    }
}
#endif

// ---- glibc 2.38: C23 strtol and scanf ------------------------------------------------------------
// With _GNU_SOURCE (always on in g++), 2.38+ headers send strtol and the scanf family to __isoc23_
// names that also read a 0b prefix. The 2.17 functions read everything else the same way.
#if __GLIBC_PREREQ(2, 38)
long __isoc23_strtol(const char* s, char** end, int base) { return strtol(s, end, base); }
long long __isoc23_strtoll(const char* s, char** end, int base) { return strtoll(s, end, base); }
unsigned long __isoc23_strtoul(const char* s, char** end, int base) { return strtoul(s, end, base); }
unsigned long long __isoc23_strtoull(const char* s, char** end, int base) { return strtoull(s, end, base); }
int __isoc99_vsscanf(const char*, const char*, va_list);
int __isoc99_vfscanf(FILE*, const char*, va_list);
int __isoc23_vsscanf(const char* s, const char* fmt, va_list ap) { return __isoc99_vsscanf(s, fmt, ap); }
int __isoc23_vfscanf(FILE* f, const char* fmt, va_list ap) { return __isoc99_vfscanf(f, fmt, ap); }
int __isoc23_sscanf(const char* s, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int r = __isoc99_vsscanf(s, fmt, ap);
    va_end(ap);
    return r;
}
int __isoc23_fscanf(FILE* f, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int r = __isoc99_vfscanf(f, fmt, ap);
    va_end(ap);
    return r;
}
#endif
