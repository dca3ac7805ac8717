#include "options.hpp"

#include <cmath>
#include <stdexcept>

#include "address_rotation.hpp"

namespace scaler_native {

namespace {

double positive_seconds(const std::string& option, const std::string& text) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || !(value > 0) || !std::isfinite(value)) {
    throw std::invalid_argument(option + ": expected a number of seconds > 0, got '" + text + "'");
  }
  return value;
}

uint32_t count(const std::string& option, const std::string& text, uint32_t lowest) {
  size_t used = 0;
  unsigned long long value = 0;
  try {
    value = std::stoull(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || text.empty() || text[0] == '-' || value < lowest || value > UINT32_MAX) {
    throw std::invalid_argument(option + ": expected a whole number >= " + std::to_string(lowest) + ", got '" + text + "'");
  }
  return static_cast<uint32_t>(value);
}

LogLevel level(const std::string& text) {
  if (text == "DEBUG") return LogLevel::debug;
  if (text == "INFO") return LogLevel::info;
  if (text == "WARNING") return LogLevel::warning;
  if (text == "ERROR" || text == "CRITICAL") return LogLevel::error;
  throw std::invalid_argument("--logging-level: choose from DEBUG, INFO, WARNING, ERROR, CRITICAL, got '" + text + "'");
}

}  // namespace

std::string usage() {
  return "usage: scaler_native_worker [options] address\n"
         "\n"
         "Run one native Scaler worker: it runs the native functions it was built with\n"
         "(PROTOCOL.md section 16) for clients that submit them with scaler.native(name).\n"
         "The address is the scheduler's, or a comma-separated list of a scheduler and its\n"
         "standbys in rank order (tcp://a:2345,tcp://b:2345): it serves the one that serves.\n"
         "\n"
         "options:\n"
         "  -h, --help                           show this help message and exit\n"
         "  --version                            print the release and the protocol version and revision it\n"
         "                                       speaks, and exit\n"
         "  --worker-name NAME, -wn NAME         name shown in logs and the monitor (default: <hostname>|<pid>)\n"
         "  --per-worker-task-queue-size N, -wtqs N\n"
         "                                       tasks this worker accepts at once, queued plus running (default: 1000)\n"
         "  --threads N, -t N                    tasks run at the same time (default: 1)\n"
         "  --heartbeat-interval S, -hi S        seconds between heartbeats; the scheduler may ask for more (default: 2)\n"
         "  --death-timeout-seconds S, -ds S     exit after this long without a word from the scheduler (default: 300);\n"
         "                                       until then tasks run on, and a restarted scheduler is rejoined\n"
         "  --logging-level LEVEL, -ll LEVEL     DEBUG, INFO, WARNING, ERROR or CRITICAL (default: INFO)\n"
         "  --exit-with-parent                   exit when the process that started this one exits\n"
         "  --tags TAGS                          comma-separated capabilities besides 'native', e.g. gpu,fast\n";
}

// "gpu,fast" -> {"gpu", "fast"}; an empty tag (",," or a trailing comma) is an error, as in scaler_cluster.
std::vector<std::string> tag_list(const std::string& text) {
  std::vector<std::string> tags;
  size_t start = 0;
  while (true) {
    size_t comma = text.find(',', start);
    std::string tag = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    size_t first = tag.find_first_not_of(' ');
    size_t last = tag.find_last_not_of(' ');
    tag = first == std::string::npos ? "" : tag.substr(first, last - first + 1);
    if (tag.empty()) throw std::invalid_argument("--tags: a tag is empty in '" + text + "'");
    tags.push_back(tag);
    if (comma == std::string::npos) return tags;
    start = comma + 1;
  }
}

std::optional<Options> parse_options(const std::vector<std::string>& arguments, std::string& error) {
  Options options;
  bool have_address = false;
  try {
    for (size_t i = 0; i < arguments.size(); ++i) {
      const std::string& argument = arguments[i];
      auto value = [&]() -> const std::string& {
        if (i + 1 >= arguments.size()) throw std::invalid_argument(argument + ": expected a value");
        return arguments[++i];
      };
      if (argument == "-h" || argument == "--help") {
        error.clear();
        return std::nullopt;
      } else if (argument == "--worker-name" || argument == "-wn") {
        options.name = value();
      } else if (argument == "--per-worker-task-queue-size" || argument == "-wtqs") {
        options.capacity = count(argument, value(), 1);
      } else if (argument == "--threads" || argument == "-t") {
        options.threads = count(argument, value(), 1);
      } else if (argument == "--heartbeat-interval" || argument == "-hi") {
        options.heartbeat_interval_seconds = positive_seconds(argument, value());
      } else if (argument == "--death-timeout-seconds" || argument == "-ds") {
        options.death_timeout_seconds = positive_seconds(argument, value());
      } else if (argument == "--logging-level" || argument == "-ll") {
        options.logging_level = level(value());
      } else if (argument == "--tags") {
        options.tags = tag_list(value());
      } else if (argument == "--exit-with-parent") {
        options.exit_with_parent = true;
      } else if (!argument.empty() && argument[0] == '-') {
        throw std::invalid_argument("unrecognized option " + argument);
      } else if (have_address) {
        throw std::invalid_argument("one address argument only, got '" + options.address + "' and '" + argument +
                                    "' (several schedulers go in one, comma-separated: tcp://a:2345,tcp://b:2345)");
      } else {
        options.address = argument;
        have_address = true;
      }
    }
    if (!have_address) throw std::invalid_argument("the scheduler's address is required, e.g. tcp://127.0.0.1:2345");
    options.addresses = parse_scheduler_addresses(options.address);
  } catch (const std::invalid_argument& problem) {
    error = problem.what();
    return std::nullopt;
  }
  return options;
}

}  // namespace scaler_native
