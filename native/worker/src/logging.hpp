// One line per event, as the Python peers log: `[LEVEL]time: component: message`.
#pragma once

#include <string>

#include "options.hpp"

namespace scaler_native {

void set_log_level(LogLevel level);
void log(LogLevel level, const std::string& message);

}  // namespace scaler_native
