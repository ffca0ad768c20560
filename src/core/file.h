// Files as a command line needs them: reading a named input that may be anything (a directory, a
// FIFO with no writer, a device), writing an output that replaces a regular file whole or not at
// all, and checking that what went to stdout really got there. Every failure is one bankml::Error
// naming the path and the errno text ("/tmp: Is a directory").
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace bankml::file {

// The bytes of PATH. Opened without blocking (a FIFO with no writer reads as empty instead of
// waiting for one forever); a directory is an error. Pipes, FIFOs and character devices are read
// to their end, so `-f <(cmd)` and `-f /dev/stdin` work.
std::string read_all(const std::string& path);

// Opens PATH for reading as a regular file only, without blocking on a FIFO: the descriptor, or
// an Error ("PATH: not a regular file (a FIFO)"). Used for files that are memory-mapped.
int open_regular(const std::string& path);

// An output file replaced atomically: the bytes go to TARGET.part next to it, and commit()
// renames that over TARGET; until then TARGET is untouched, and the destructor removes the part
// file of an output never committed. TARGET must be absent or a regular file; a symlink to a
// regular file is written through (its target is replaced, the link stays). A directory, a
// device, a FIFO, a socket or a dangling symlink is refused before anything is written.
class Output {
public:
    explicit Output(const std::string& path);
    ~Output();
    Output(const Output&) = delete;
    Output& operator=(const Output&) = delete;
    void write(const void* p, size_t n);
    void commit();
    const std::string& path() const { return path_; }

private:
    [[noreturn]] void fail(const std::string& call, int err);
    std::string path_, target_, part_;
    int fd_ = -1;
    bool committed_ = false;
};

// Flushes F and throws "write error: <errno text>" if anything written to it since the start
// failed (a full disk, a closed descriptor, a reader that went away).
void check_written(std::FILE* f);

// Writes S to F and flushes it (streamed text): a failure throws "write error: <errno text>" at
// once, so generation stops when its output has nowhere to go.
void put(std::string_view s, std::FILE* f = stdout);

// Makes sure descriptors 0, 1 and 2 are open (on /dev/null, read-only), so that a file the
// program opens never becomes its stdout when the caller closed it: writing to such a stdout then
// fails with EBADF and is reported, instead of landing in the file.
void guard_std_descriptors();

}  // namespace bankml::file
