// The SDK's internals, shared by its sources and the frame fuzzer; not part of the driver's API.
#ifndef NNTS_SDK_INTERNAL_HPP
#define NNTS_SDK_INTERNAL_HPP

#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "nnts/driver.hpp"

namespace nnts {
namespace sdk {

constexpr uint32_t PROTOCOL_VERSION = 3;  // the newest; HELLO settles on the client's version
constexpr uint32_t OLDEST_PROTOCOL_VERSION = 2;
constexpr uint32_t HARDWARE_BUFFER_POOL_VERSION = 3;  // request pools that are hardware buffers
constexpr uint32_t HINTS_VERSION = 3;  // compilation and execution hints in PREPARE_MODEL and executions
constexpr uint64_t MAX_REQUEST_BODY = uint64_t(1) << 28;
constexpr uint32_t MAX_RANK_ACCEPTED = 64;

enum Msg : uint32_t {
    HELLO = 1, GET_SUPPORTED_OPERATIONS = 2, PREPARE_MODEL = 3, PREPARE_MODEL_FROM_CACHE = 4, EXECUTE_SYNC = 5,
    EXECUTE_ASYNC = 6, EXECUTE_FENCED = 7, CONFIGURE_BURST = 8, BURST_EXECUTE = 9, BURST_RELEASE_MEMORY = 10,
    ALLOCATE = 11, BUFFER_COPY_TO = 12, BUFFER_COPY_FROM = 13, TRACE_START = 14, TRACE_COLLECT = 15,
    REGION_ADD = 20, REGION_REMOVE = 21, RELEASE = 22,
    REPLY_ERROR = 100, REPLY_DEVICE_INFO = 101, REPLY_SUPPORTED = 102, REPLY_PREPARED = 103, REPLY_EXECUTED = 104, REPLY_LAUNCHED = 105,
    REPLY_EXECUTION_DONE = 106, REPLY_FENCED_DONE = 107, REPLY_BURST = 108, REPLY_BUFFER = 109, REPLY_OK = 110, REPLY_TRACE_CLOCK = 111,
    REPLY_TRACE_SPANS = 112,
};

const char* messageName(uint32_t type);

// A shared-memory region mapped from the client's file; unmapped when nothing uses it any more.
struct Mapping {
    uint8_t* base = nullptr;
    uint64_t size = 0;
    size_t mapped = 0;
    bool owned = true;  // munmap at the end (false: memory the fuzzer lends)
    ~Mapping();
};
using RegionOpener = std::function<std::shared_ptr<Mapping>(const std::string& path, uint64_t size)>;
std::shared_ptr<Mapping> mapRegionFile(const std::string& path, uint64_t size);

// Where replies go: one frame at a time, from any thread.
class Output {
  public:
    virtual ~Output() = default;
    virtual void frame(uint32_t type, uint64_t callId, const std::vector<uint8_t>& body) = 0;
};

class FdOutput : public Output {
  public:
    explicit FdOutput(int fd) : fd_(fd) {}
    void frame(uint32_t type, uint64_t callId, const std::vector<uint8_t>& body) override;
    bool broken() const { return broken_; }

  private:
    int fd_;
    std::mutex mutex_;
    bool broken_ = false;
};

class WorkerPool {
  public:
    explicit WorkerPool(unsigned workers);
    ~WorkerPool();
    void submit(std::function<void()> job);  // inline when the pool has no workers
    void drain();                            // waits for every job submitted so far

  private:
    void run();
    std::mutex mutex_;
    std::condition_variable wake_, idle_;
    std::deque<std::function<void()>> jobs_;
    std::vector<std::thread> threads_;
    unsigned busy_ = 0;
    bool stopping_ = false;
};

struct Connection;

// One connection's state and its handling of frames; frames arrive in order from one thread.
class Server {
  public:
    Server(std::shared_ptr<IDevice> device, Output& out, WorkerPool& pool, RegionOpener opener);
    ~Server();
    void handle(uint32_t type, uint64_t callId, const uint8_t* body, size_t size);
    void finish();  // the connection ended: waits for its executions, releases everything
    bool waitIdleFor(int64_t milliseconds);  // true when no request is in flight any more

  private:
    std::unique_ptr<Connection> c_;
};

// Serves one byte stream: frames from in, replies to out, until the end of the stream; then
// waits for the executions still running and releases everything, or with exitAtEnd ends the
// process once they finish, or after two seconds (a stdio server whose client is gone: a hung
// execution must not keep it alive). Returns false when a frame broke the
// protocol (the connection is then closed).
bool serveStream(const std::shared_ptr<IDevice>& device, int in, int out, unsigned workers,
                 const RegionOpener& opener = mapRegionFile, bool exitAtEnd = false);

// Fatal signals: one line naming the device and the message in hand, on stderr.
void installDeathReport(const std::string& deviceName);
void setCurrentMessage(const char* name);

}  // namespace sdk
}  // namespace nnts

#endif  // NNTS_SDK_INTERNAL_HPP
