// The transport: frames over a byte stream (stdin/stdout or a Unix socket), the worker pool,
// the command line of a served driver and the death report on stderr.
#include <errno.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "internal.hpp"

namespace nnts {
namespace sdk {

void FdOutput::frame(uint32_t type, uint64_t callId, const std::vector<uint8_t>& body) {
    std::vector<uint8_t> f(16);
    uint32_t length = uint32_t(12 + body.size());
    for (int i = 0; i < 4; i++) f[size_t(i)] = uint8_t(length >> (8 * i));
    for (int i = 0; i < 4; i++) f[size_t(4 + i)] = uint8_t(type >> (8 * i));
    for (int i = 0; i < 8; i++) f[size_t(8 + i)] = uint8_t(callId >> (8 * i));
    f.insert(f.end(), body.begin(), body.end());
    std::lock_guard<std::mutex> lock(mutex_);
    const uint8_t* p = f.data();
    size_t n = f.size();
    while (n && !broken_) {
        ssize_t k = write(fd_, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            broken_ = true;  // the client went away: the reading side sees the end of its stream
            break;
        }
        p += k;
        n -= size_t(k);
    }
}

WorkerPool::WorkerPool(unsigned workers) {
    for (unsigned i = 0; i < workers; i++) threads_.emplace_back([this] { run(); });
}

WorkerPool::~WorkerPool() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stopping_ = true;
    }
    wake_.notify_all();
    for (auto& t : threads_) t.join();
}

void WorkerPool::submit(std::function<void()> job) {
    if (threads_.empty()) return job();
    {
        std::lock_guard<std::mutex> lock(mutex_);
        jobs_.push_back(std::move(job));
    }
    wake_.notify_one();
}

void WorkerPool::drain() {
    std::unique_lock<std::mutex> lock(mutex_);
    idle_.wait(lock, [this] { return jobs_.empty() && busy_ == 0; });
}

void WorkerPool::run() {
    for (;;) {
        std::function<void()> job;
        {
            std::unique_lock<std::mutex> lock(mutex_);
            wake_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
            if (jobs_.empty()) return;
            job = std::move(jobs_.front());
            jobs_.pop_front();
            busy_++;
        }
        job();
        std::lock_guard<std::mutex> lock(mutex_);
        busy_--;
        if (jobs_.empty() && busy_ == 0) idle_.notify_all();
    }
}

namespace {

bool readAll(int fd, uint8_t* p, size_t n) {
    while (n) {
        ssize_t k = read(fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return false;
        p += k;
        n -= size_t(k);
    }
    return true;
}

uint64_t le(const uint8_t* p, int bytes) {
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

// ---- the death report ------------------------------------------------------------------------

char deathPrefix[160];
thread_local const char* messageInHand = nullptr;

void writeStderr(const char* s) {
    ssize_t ignored = write(2, s, std::strlen(s));
    (void)ignored;
}

void onFatalSignal(int sig) {
    // Async-signal-safe: fixed buffers and write(2) only.
    writeStderr(deathPrefix);
    writeStderr(sig == SIGSEGV ? "SIGSEGV" : sig == SIGBUS ? "SIGBUS" : sig == SIGFPE ? "SIGFPE"
                : sig == SIGILL ? "SIGILL" : sig == SIGABRT ? "SIGABRT" : "a fatal signal");
    writeStderr(messageInHand ? " while handling " : " between messages");
    if (messageInHand) writeStderr(messageInHand);
    writeStderr("\n");
    signal(sig, SIG_DFL);
    raise(sig);
}

}  // namespace

void setCurrentMessage(const char* name) { messageInHand = name; }

void installDeathReport(const std::string& deviceName) {
    std::snprintf(deathPrefix, sizeof deathPrefix, "nnts-driver: %.100s died of ", deviceName.c_str());
    static char altStack[1 << 16];
    stack_t ss{};
    ss.ss_sp = altStack;
    ss.ss_size = sizeof altStack;
    sigaltstack(&ss, nullptr);
    struct sigaction sa {};
    sa.sa_handler = onFatalSignal;
    sa.sa_flags = SA_ONSTACK | SA_RESETHAND;
    for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) sigaction(sig, &sa, nullptr);
}

bool serveStream(const std::shared_ptr<IDevice>& device, int in, int out, unsigned workers, const RegionOpener& opener,
                 bool exitAtEnd) {
    Server* served = nullptr;
    auto end = [exitAtEnd, &served](bool clean) {
        if (exitAtEnd) {  // a client that half-closes still gets its last replies, a hung driver no wait
            if (served) served->waitIdleFor(2000);
            std::fflush(stderr);
            _exit(clean ? 0 : 1);
        }
        return clean;
    };
    FdOutput output(out);
    WorkerPool pool(workers);
    Server server(device, output, pool, opener);
    served = &server;
    std::vector<uint8_t> body;
    for (;;) {
        uint8_t header[16];
        if (!readAll(in, header, sizeof header)) break;  // the client closed the connection
        uint64_t length = le(header, 4);
        if (length < 12 || length - 12 > MAX_REQUEST_BODY) {
            std::fprintf(stderr, "nnts-driver: frame length %llu out of range; closing the connection\n",
                         (unsigned long long)length);
            if (!exitAtEnd) server.finish();
            return end(false);
        }
        // Grown as the bytes arrive, never to a size the peer only claims.
        size_t want = size_t(length - 12), have = 0;
        body.clear();
        bool complete = true;
        while (have < want) {
            size_t chunk = std::min<size_t>(want - have, size_t(1) << 20);
            body.resize(have + chunk);
            if (!readAll(in, body.data() + have, chunk)) {
                complete = false;
                break;
            }
            have += chunk;
        }
        if (!complete) break;
        server.handle(uint32_t(le(header + 4, 4)), le(header + 8, 8), body.data(), want);
    }
    if (!exitAtEnd) server.finish();
    return end(true);
}

}  // namespace sdk

namespace {

int usage(const char* program, const std::string& what) {
    std::fprintf(stderr, "%s: %s (usage: %s [--socket PATH] [--workers N])\n", program, what.c_str(), program);
    return 2;
}

// Listens on a Unix socket of the owner's only; replaces only an earlier server's socket at path.
int listenOn(const char* program, const std::string& path) {
    sockaddr_un addr{};
    if (path.size() >= sizeof addr.sun_path) {
        usage(program, "socket path too long: " + path);
        return -1;
    }
    struct stat st{};
    if (lstat(path.c_str(), &st) == 0) {
        if (!S_ISSOCK(st.st_mode) || st.st_uid != getuid()) {
            std::fprintf(stderr, "%s: %s exists and is not a socket of this user's; not replacing it\n", program,
                         path.c_str());
            return -1;
        }
        unlink(path.c_str());
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path.c_str(), path.size());
    mode_t old = umask(077);
    int bound = fd < 0 ? -1 : bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    umask(old);
    if (bound < 0 || listen(fd, 4) < 0) {
        std::fprintf(stderr, "%s: cannot listen on %s: %s\n", program, path.c_str(), std::strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    return fd;
}

}  // namespace

int serve(std::shared_ptr<IDevice> device, int argc, char** argv) {
    const char* program = argc > 0 && argv[0] ? argv[0] : "nnts-driver";
    std::string socketPath;
    unsigned workers = 4;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        if ((a == "--socket" || a == "--workers") && i + 1 >= argc) return usage(program, a + " needs a value");
        if (a == "--socket") {
            socketPath = argv[++i];
        } else if (a == "--workers") {
            char* end = nullptr;
            long n = std::strtol(argv[++i], &end, 10);
            if (!end || *end || n < 0 || n > 256) return usage(program, "--workers takes a number 0-256");
            workers = unsigned(n);
        } else {
            return usage(program, "unknown argument " + a);
        }
    }
    if (!device) return usage(program, "no device to serve");
    sdk::installDeathReport(device->getName());
    signal(SIGPIPE, SIG_IGN);  // a client that goes away is an EPIPE, not a signal
    if (socketPath.empty()) {
        // stdout carries frames only: keep it for the protocol and point fd 1 at stderr.
        int out = dup(1);
        if (out < 0 || dup2(2, 1) < 0) return 1;
        return sdk::serveStream(device, 0, out, workers, sdk::mapRegionFile, true) ? 0 : 1;
    }
    int listener = listenOn(program, socketPath);
    if (listener < 0) return 1;
    for (;;) {
        int conn = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
        if (conn < 0) {
            if (errno == EINTR) continue;
            std::fprintf(stderr, "%s: accept: %s\n", program, std::strerror(errno));
            return 1;
        }
        sdk::serveStream(device, conn, conn, workers);  // one client at a time, everything released after
        close(conn);
    }
}

}  // namespace nnts
