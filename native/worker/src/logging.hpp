// One line per event, as the Python peers log: `[LEVEL]time: component: message`.
#pragma once

#include <string>

#include "options.hpp"

namespace scaler_native {

void set_log_level(LogLevel level);
void log(LogLevel level, const std::string& message);
// Whether a message of this level is written: a caller on the per-task path builds the text only then.
bool log_enabled(LogLevel level);

}  // namespace scaler_native
