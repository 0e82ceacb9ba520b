// The Prometheus endpoint: the text it serves parsed by a reader of the exposition format written
// here (HELP and TYPE before a family's samples, escaped label values), scraped over real HTTP on
// loopback, one step's samples seen all together, and a port already taken refused by name.
#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <future>
#include <map>
#include <sstream>

#include "core/error.hpp"
#include "core/observe/metrics_endpoint.hpp"
#include "tests/support/loopback_port.hpp"

using namespace mlpt;

namespace {

struct Sample {
  std::string type, help;
  std::map<std::string, std::string> labels;
  double value;
};

// name{labels} -> sample, from the text format: "# HELP name text", "# TYPE name type", then
// samples `name{label="value",...} number`; label values escape \\, \" and \n.
std::multimap<std::string, Sample> parse(const std::string& text) {
  std::multimap<std::string, Sample> out;
  std::map<std::string, std::string> types, helps;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("# HELP ", 0) == 0) {
      auto rest = line.substr(7), name = rest.substr(0, rest.find(' '));
      helps[name] = rest.substr(name.size() + 1);
      continue;
    }
    if (line.rfind("# TYPE ", 0) == 0) {
      auto rest = line.substr(7), name = rest.substr(0, rest.find(' '));
      types[name] = rest.substr(name.size() + 1);
      continue;
    }
    Sample s;
    size_t at = line.find_first_of("{ ");
    const std::string name = line.substr(0, at);
    if (line[at] == '{') {
      ++at;
      while (line[at] != '}') {
        const size_t eq = line.find('=', at);
        const std::string label = line.substr(at, eq - at);
        REQUIRE(line[eq + 1] == '"');
        std::string value;
        for (at = eq + 2; line[at] != '"'; ++at) {
          if (line[at] == '\\') {
            ++at;
            value += line[at] == 'n' ? '\n' : line[at];
          } else {
            value += line[at];
          }
        }
        s.labels[label] = value;
        ++at;
        if (line[at] == ',') ++at;
      }
      ++at;
    }
    s.value = std::stod(line.substr(at + 1));
    INFO(line);
    REQUIRE(types.count(name));  // TYPE comes before a family's samples
    s.type = types[name], s.help = helps[name];
    out.emplace(name, s);
  }
  return out;
}

}  // namespace

TEST_CASE("metrics: the exposition text reads back, labels escaped, types and help given", "[observe]") {
  observe::PrometheusMetrics m;
  m.set("mlpt_step", observe::PrometheusMetrics::Type::kGauge, "steps done", 3);
  m.add("mlpt_rollouts_total", "rollouts", 2, {{"outcome", "ok"}, {"worker", "rollout worker 1 (rank 2)"}});
  m.add("mlpt_rollouts_total", "rollouts", 5, {{"outcome", "ok"}, {"worker", "rollout worker 1 (rank 2)"}});
  m.add("mlpt_rollouts_total", "rollouts", 1,
        {{"outcome", "failed"}, {"worker", "a \"quoted\\ name\nwith a newline"}});
  m.set("mlpt_reward_mean", observe::PrometheusMetrics::Type::kGauge, "reward", 0.125);
  const auto parsed = parse(m.text());
  REQUIRE(parsed.size() == 4);
  CHECK(parsed.find("mlpt_step")->second.value == 3);
  CHECK(parsed.find("mlpt_step")->second.type == "gauge");
  CHECK(parsed.find("mlpt_step")->second.help == "steps done");
  CHECK(parsed.find("mlpt_reward_mean")->second.value == 0.125);
  auto [from, to] = parsed.equal_range("mlpt_rollouts_total");
  std::map<std::string, double> by_worker;
  for (auto it = from; it != to; ++it) {
    CHECK(it->second.type == "counter");
    by_worker[it->second.labels.at("worker")] = it->second.value;
  }
  CHECK(by_worker.at("rollout worker 1 (rank 2)") == 7);
  CHECK(by_worker.at("a \"quoted\\ name\nwith a newline") == 1);
  CHECK_THROWS_WITH(m.set("mlpt step", observe::PrometheusMetrics::Type::kGauge, "", 1),
                    Catch::Contains("'mlpt step'"));
  CHECK_THROWS_WITH(m.set("ok", observe::PrometheusMetrics::Type::kGauge, "", 1, {{"0bad", "x"}}),
                    Catch::Contains("'0bad'"));
}

TEST_CASE("metrics: a scrape sees a batch's samples all together or not at all", "[observe]") {
  using Type = observe::PrometheusMetrics::Type;
  observe::PrometheusMetrics m;
  m.set("mlpt_step", Type::kGauge, "steps done", 1);
  m.set("mlpt_samples", Type::kGauge, "samples", 64);
  std::future<std::string> scrape;
  {
    auto step = m.batch();
    step.set("mlpt_step", Type::kGauge, "steps done", 2);
    scrape = std::async(std::launch::async, [&] { return m.text(); });
    // The scrape waits for the batch (were it not locked out, it would be done long before).
    CHECK(scrape.wait_for(std::chrono::milliseconds(200)) == std::future_status::timeout);
    step.set("mlpt_samples", Type::kGauge, "samples", 128);
    step.add("mlpt_refit_bytes_total", "bytes", 10);
  }
  const auto parsed = parse(scrape.get());
  CHECK(parsed.find("mlpt_step")->second.value == 2);
  CHECK(parsed.find("mlpt_samples")->second.value == 128);
  CHECK(parsed.find("mlpt_refit_bytes_total")->second.value == 10);
}

TEST_CASE("metrics: /metrics is scraped over HTTP and follows the values", "[observe]") {
  observe::PrometheusMetrics m;
  m.set("mlpt_step", observe::PrometheusMetrics::Type::kGauge, "steps done", 1);
  const int port = free_port();
  observe::MetricsEndpoint endpoint(m, port);
  CHECK(endpoint.port() == port);
  httplib::Client client("127.0.0.1", port);
  auto first = client.Get("/metrics");
  REQUIRE(first);
  CHECK(first->status == 200);
  CHECK(first->get_header_value("Content-Type") == "text/plain; version=0.0.4; charset=utf-8");
  CHECK(first->body == m.text());
  CHECK(parse(first->body).find("mlpt_step")->second.value == 1);
  m.set("mlpt_step", observe::PrometheusMetrics::Type::kGauge, "steps done", 2);
  auto second = client.Get("/metrics");
  REQUIRE(second);
  CHECK(parse(second->body).find("mlpt_step")->second.value == 2);
  auto other = client.Get("/other");
  REQUIRE(other);
  CHECK(other->status == 404);
}

TEST_CASE("metrics: a port already taken is an error naming it", "[observe]") {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(listen(fd, 1) == 0);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  const int port = ntohs(a.sin_port);
  observe::PrometheusMetrics m;
  CHECK_THROWS_WITH(observe::MetricsEndpoint(m, port),
                    Catch::Contains("metrics_port") && Catch::Contains(std::to_string(port)));
  close(fd);
}
