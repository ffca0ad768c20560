#include "core/file.h"

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"

namespace bankml::file {

namespace {

std::string errno_text(const std::string& path, int e) { return path + ": " + std::strerror(e); }

const char* kind_of(mode_t m) {
    if (S_ISDIR(m)) return "a directory";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISSOCK(m)) return "a socket";
    return "not a regular file";
}

std::string not_regular(const std::string& path, mode_t m) {
    if (S_ISDIR(m)) return errno_text(path, EISDIR);
    return path + ": not a regular file (" + kind_of(m) + ")";
}

}  // namespace

int open_regular(const std::string& path) {
    // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever.
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) throw Error("open(" + path + ") failed: " + std::strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        ::close(fd);
        throw Error("fstat(" + path + ") failed: " + std::strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        throw Error(not_regular(path, st.st_mode));
    }
    return fd;
}

std::string read_all(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) throw Error(errno_text(path, errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || S_ISDIR(st.st_mode)) {
        int e = S_ISDIR(st.st_mode) ? EISDIR : errno;
        ::close(fd);
        throw Error(errno_text(path, e));
    }
    // Open without blocking, read blocking: a pipe with a writer is read to its end.
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    std::string out;
    char buf[65536];
    while (true) {
        ssize_t n = ::read(fd, buf, sizeof buf);
        if (n < 0) {
            if (errno == EINTR) continue;
            int e = errno;
            ::close(fd);
            throw Error("read(" + path + ") failed: " + std::strerror(e));
        }
        if (n == 0) break;
        out.append(buf, size_t(n));
    }
    ::close(fd);
    return out;
}

Output::Output(const std::string& path) : path_(path), target_(path) {
    if (path.empty()) throw Error("the output file name is empty");
    struct stat lst, st;
    if (lstat(path.c_str(), &lst) == 0) {
        if (S_ISLNK(lst.st_mode)) {
            if (stat(path.c_str(), &st) != 0) throw Error(path + ": a symlink to nothing writable (" + std::strerror(errno) + ")");
            if (!S_ISREG(st.st_mode)) throw Error(not_regular(path, st.st_mode));
            // Written through: the link's target is what gets replaced.
            char* real = realpath(path.c_str(), nullptr);
            if (!real) throw Error("realpath(" + path + ") failed: " + std::strerror(errno));
            target_ = real;
            std::free(real);
        } else if (!S_ISREG(lst.st_mode)) {
            throw Error(not_regular(path, lst.st_mode));
        }
    } else if (errno != ENOENT) {
        throw Error(errno_text(path, errno));
    }
    part_ = target_ + ".part";
    // O_NOFOLLOW: a symlink planted at the part file's name is refused, never followed.
    fd_ = ::open(part_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
    if (fd_ < 0) throw Error("open(" + part_ + ") failed: " + std::strerror(errno));
    if (fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
        ::close(fd_);
        fd_ = -1;
        throw Error(part_ + ": not a regular file; remove it and retry");
    }
    int fl = fcntl(fd_, F_GETFL);
    if (fl >= 0) fcntl(fd_, F_SETFL, fl & ~O_NONBLOCK);
}

Output::~Output() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_ && !part_.empty()) ::unlink(part_.c_str());
}

void Output::fail(const std::string& call, int err) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    ::unlink(part_.c_str());
    part_.clear();
    throw Error(call + " failed: " + std::strerror(err));
}

void Output::write(const void* p, size_t n) {
    if (fd_ < 0) throw Error("write(" + part_ + "): the file is closed");
    const char* c = static_cast<const char*>(p);
    while (n) {
        ssize_t w = ::write(fd_, c, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            fail("write(" + part_ + ")", errno);
        }
        c += w;
        n -= size_t(w);
    }
}

void Output::commit() {
    if (fd_ < 0) throw Error("commit(" + path_ + "): the file is closed");
    if (::fsync(fd_) != 0 && errno != EINVAL && errno != EROFS) fail("fsync(" + part_ + ")", errno);
    int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) fail("close(" + part_ + ")", errno);
    if (std::rename(part_.c_str(), target_.c_str()) != 0) fail("rename(" + part_ + ", " + target_ + ")", errno);
    committed_ = true;
}

void check_written(std::FILE* f) {
    const int earlier = errno;
    errno = 0;
    bool bad = std::fflush(f) != 0;
    int e = bad ? errno : 0;
    if (!bad && !std::ferror(f)) {
        errno = earlier;
        return;
    }
    // A write that failed earlier left the error flag; the errno it left is the best we still
    // have (the streaming commands check each write, so theirs is exact).
    if (e == 0) e = earlier ? earlier : EIO;
    std::clearerr(f);
    throw Error(std::string("write error: ") + std::strerror(e));
}

void put(std::string_view s, std::FILE* f) {
    if (!s.empty() && std::fwrite(s.data(), 1, s.size(), f) != s.size()) {
        int e = errno;
        std::clearerr(f);
        throw Error(std::string("write error: ") + std::strerror(e));
    }
    if (std::fflush(f) != 0) {
        int e = errno;
        std::clearerr(f);
        throw Error(std::string("write error: ") + std::strerror(e));
    }
}

void guard_std_descriptors() {
    for (int fd = 0; fd <= 2; ++fd) {
        if (fcntl(fd, F_GETFD) >= 0 || errno != EBADF) continue;
        int n = ::open("/dev/null", O_RDONLY);
        if (n >= 0 && n != fd) {
            dup2(n, fd);
            ::close(n);
        }
    }
}

}  // namespace bankml::file
