// Frames <-> messages: the framing of PROTOCOL.md §1 (a Cap'n Proto control frame, then payload frames
// named by its fields) over the generated schema code.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "protocol.hpp"

namespace scaler_native {

// A message that is not a valid Scaler message (§1): the whole of it is refused.
class DecodeError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

Incoming decode(const std::vector<Bytes>& frames);

std::vector<Bytes> encode(const Outgoing& message);
// After a rejoin: every task held from the scheduler before, running or queued, unanswered (§21). Made once per
// rejoin by the agent alone, so not one of the core's messages (Outgoing).
std::vector<Bytes> encode_reannounce(const std::vector<uint64_t>& task_ids);

// The name of a message for logs, as PROTOCOL.md calls it.
const char* member_name(const Incoming& message);

}  // namespace scaler_native
