// Linked in place of AOSP's cpu_operations/Multinomial.cpp when the random-number sources it needs
// (common/random/*.cc, TensorFlow's Philox generator) do not build: they include TensorFlow's
// core/platform headers, which an AOSP checkout does not carry. CpuExecutor calls Multinomial
// directly, so the executor links; the driver reports RANDOM_MULTINOMIAL unsupported and this
// class fails every call.
#include <CpuExecutor.h>
#include <Multinomial.h>
#include <android-base/logging.h>

namespace android {
namespace nn {

Multinomial::Multinomial(const Operation&, RunTimeOperandInfo*)
    : input_(nullptr), sample_count_(0), random_seeds_(nullptr), output_(nullptr) {}

bool Multinomial::Prepare(const Operation&, RunTimeOperandInfo*, Shape*) {
    LOG(ERROR) << "RANDOM_MULTINOMIAL is not built in this driver (its random sources need TensorFlow's core)";
    return false;
}

bool Multinomial::Eval() {
    return false;
}

}  // namespace nn
}  // namespace android
