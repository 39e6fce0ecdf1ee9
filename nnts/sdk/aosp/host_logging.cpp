// libbase's LOG and CHECK for a host build of AOSP's CPU executor. libbase's own logging.cpp needs
// a newer liblog than Debian's android-liblog (its __android_log_message API), so nnts writes the
// few functions AOSP's code calls: a message at ERROR or above is kept as the calling thread's last
// error (the driver puts it into the failed call's message); it is printed on stderr from the
// severity NNTS_AOSP_LOG names (verbose, debug, info, warning, error; default: fatal only).
// FATAL prints and aborts, as libbase does.
#include <android-base/logging.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>

namespace nnts_aosp {
thread_local std::string lastError;  // read and cleared by aosp_cpu_driver.cpp
}

// libbase's posix_strerror_r.cpp undefines _GNU_SOURCE to reach the POSIX strerror_r, which the
// forced `-include cstring` of the build defeats; glibc exports the POSIX one as __xpg_strerror_r.
extern "C" int __xpg_strerror_r(int errnum, char* buf, size_t buflen);
extern "C" int posix_strerror_r(int errnum, char* buf, size_t buflen) {
    return __xpg_strerror_r(errnum, buf, buflen);
}

namespace android {
namespace base {

namespace {
LogSeverity printedFrom() {
    static const LogSeverity severity = [] {
        const char* value = std::getenv("NNTS_AOSP_LOG");
        if (value == nullptr) return FATAL;
        const std::string name(value);
        if (name == "verbose") return VERBOSE;
        if (name == "debug") return DEBUG;
        if (name == "info") return INFO;
        if (name == "warning") return WARNING;
        if (name == "error") return ERROR;
        return FATAL;
    }();
    return severity;
}

const char* basename(const char* file) {
    const char* slash = std::strrchr(file, '/');
    return slash != nullptr ? slash + 1 : file;
}
}  // namespace

class LogMessageData {
  public:
    LogMessageData(const char* file, unsigned int line, LogSeverity severity, const char* tag, int error)
        : file(basename(file)), line(line), severity(severity), tag(tag), error(error) {}
    std::ostringstream buffer;
    const char* const file;
    const unsigned int line;
    const LogSeverity severity;
    const char* const tag;
    const int error;
};

bool ShouldLog(LogSeverity severity, const char*) {
    return severity >= ERROR || severity >= printedFrom();
}

LogMessage::LogMessage(const char* file, unsigned int line, LogId, LogSeverity severity, const char* tag,
                       int error)
    : LogMessage(file, line, severity, tag, error) {}

LogMessage::LogMessage(const char* file, unsigned int line, LogSeverity severity, const char* tag, int error)
    : data_(new LogMessageData(file, line, severity, tag, error)) {}

LogMessage::~LogMessage() {
    if (data_->error != -1) data_->buffer << ": " << std::strerror(data_->error);
    const std::string message = data_->buffer.str();
    if (data_->severity >= ERROR && nnts_aosp::lastError.size() < 2000) {
        if (!nnts_aosp::lastError.empty()) nnts_aosp::lastError += "; ";
        nnts_aosp::lastError += message;
    }
    if (data_->severity >= printedFrom() || data_->severity >= FATAL) {
        LogLine(data_->file, data_->line, data_->severity, data_->tag, message.c_str());
    }
    if (data_->severity >= FATAL) std::abort();
}

std::ostream& LogMessage::stream() {
    return data_->buffer;
}

void LogMessage::LogLine(const char* file, unsigned int line, LogSeverity severity, const char* tag,
                         const char* message) {
    static const char kLetters[] = "VDIWEFF";
    const int index = static_cast<int>(severity);
    std::fprintf(stderr, "aosp-cpu-driver %c %s %s:%u] %s\n", index >= 0 && index < 7 ? kLetters[index] : '?',
                 tag != nullptr ? tag : "", file, line, message);
}

}  // namespace base
}  // namespace android
