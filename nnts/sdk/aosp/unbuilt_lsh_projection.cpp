// Compiled in place of AOSP's cpu_operations/LSHProjection.cpp when that file does not build (it
// includes Google's farmhash, utils/hash/farmhash.h, which an AOSP checkout does not carry):
// CpuExecutor calls LSHProjection directly, so the executor links; the driver reports
// LSH_PROJECTION unsupported and this class fails every call.
#include <CpuExecutor.h>
#include <LSHProjection.h>
#include <android-base/logging.h>

namespace android {
namespace nn {

LSHProjection::LSHProjection(const Operation&, RunTimeOperandInfo*)
    : type_(LSHProjectionType_DENSE), hash_(nullptr), input_(nullptr), weight_(nullptr), output_(nullptr) {}

bool LSHProjection::Prepare(const Operation&, RunTimeOperandInfo*, Shape*) {
    LOG(ERROR) << "LSH_PROJECTION is not built in this driver (its file needs farmhash)";
    return false;
}

template <typename T>
bool LSHProjection::Eval() {
    return false;
}

template bool LSHProjection::Eval<float>();
template bool LSHProjection::Eval<_Float16>();

}  // namespace nn
}  // namespace android
