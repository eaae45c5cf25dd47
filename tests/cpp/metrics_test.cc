// The node's metrics alone: the Prometheus text (escaping, names, one TYPE
// per family), the registry (a client's series kept, replaced, its gauges
// dropped and its counters kept when it goes, malformed reports refused
// whole, the series limit), and the exporter over a real socket (GET
// /metrics answered, the token required off loopback, a bad request named).
#include <gtest/gtest.h>

#include <thread>

#include <boost/asio.hpp>

#include "scheduler/metrics_exporter.h"
#include "scheduler/metrics_registry.h"
#include "scheduler/prometheus_text.h"

namespace phalanx::scheduler {
namespace {

namespace asio = boost::asio;

rpc::MetricSeries Series(const std::string& name, rpc::MetricSeries::Kind kind, double value,
                         std::vector<std::pair<std::string, std::string>> tags = {}) {
  rpc::MetricSeries s;
  s.set_name(name);
  s.set_kind(kind);
  s.set_value(value);
  for (const auto& [k, v] : tags) {
    s.add_tag_keys(k);
    s.add_tag_values(v);
  }
  return s;
}

Client MakeClient(const std::string& id, bool worker = true) {
  Client c;
  c.client_id = id;
  c.is_worker = worker;
  c.registered = true;
  return c;
}

std::string Render(const MetricsRegistry& r) {
  PrometheusText page;
  r.Render(&page);
  return page.text();
}

TEST(PrometheusTextTest, EscapesLabelsAndWritesAFamilyOnce) {
  PrometheusText page;
  ASSERT_TRUE(page.Family("ray_x", "gauge", "line one\nline two"));
  page.Sample("ray_x", {{"a", "q\"uote\\back\nline"}, {"bad-key", "v"}}, 1.5);
  EXPECT_FALSE(page.Family("ray_x", "counter", "again"));
  page.Sample("ray_x", {}, 2);  // (skipped: the second family of that name)
  EXPECT_EQ(page.text(),
            "# HELP ray_x line one\\nline two\n# TYPE ray_x gauge\n"
            "ray_x{a=\"q\\\"uote\\\\back\\nline\",bad_key=\"v\"} 1.5\n");
  EXPECT_EQ(PrometheusText::Number(0.1), "0.1");
  EXPECT_EQ(PrometheusText::Number(1.0 / 0.0), "+Inf");
  EXPECT_EQ(PrometheusText::SafeName("9lives:ok", false), "_lives:ok");
}

TEST(MetricsRegistryTest, KeepsTheLatestOfEachSeriesAndLabelsIt) {
  MetricsRegistry r("10.0.0.1", "session_x");
  Client c = MakeClient("\x01\x02");
  rpc::MetricsReport m;
  *m.add_series() = Series("reqs", rpc::MetricSeries::COUNTER, 3, {{"route", "/a"}});
  ASSERT_TRUE(r.Merge(c, m).ok());
  m.mutable_series(0)->set_value(5);
  ASSERT_TRUE(r.Merge(c, m).ok());
  std::string page = Render(r);
  EXPECT_NE(page.find("# TYPE ray_reqs_total counter\n"), std::string::npos) << page;
  EXPECT_NE(page.find("ray_reqs_total{route=\"/a\",Component=\"core_worker\",NodeAddress=\"10.0.0.1\","
                      "SessionName=\"session_x\",WorkerId=\"0102\"} 5\n"),
            std::string::npos)
      << page;
  EXPECT_EQ(r.num_series(), 1u);
}

TEST(MetricsRegistryTest, AHistogramsBucketsAreCumulative) {
  MetricsRegistry r("h", "s");
  Client c = MakeClient("\x07");
  rpc::MetricsReport m;
  auto* h = m.add_series();
  *h = Series("lat", rpc::MetricSeries::HISTOGRAM, 1.5);
  h->add_boundaries(0.1);
  h->add_boundaries(1.6);
  h->add_bucket_counts(1);
  h->add_bucket_counts(1);
  h->add_bucket_counts(0);
  ASSERT_TRUE(r.Merge(c, m).ok());
  std::string page = Render(r);
  EXPECT_NE(page.find("le=\"0.1\"} 1\n"), std::string::npos) << page;
  EXPECT_NE(page.find("le=\"1.6\"} 2\n"), std::string::npos) << page;
  EXPECT_NE(page.find("le=\"+Inf\"} 2\n"), std::string::npos) << page;
  EXPECT_NE(page.find("ray_lat_count{"), std::string::npos) << page;
  EXPECT_NE(page.find("ray_lat_sum{"), std::string::npos) << page;
}

TEST(MetricsRegistryTest, AGoneClientsGaugesGoAndItsCountersStay) {
  MetricsRegistry r("h", "s");
  Client c = MakeClient("\x09");
  rpc::MetricsReport m;
  *m.add_series() = Series("g", rpc::MetricSeries::GAUGE, 1);
  *m.add_series() = Series("c", rpc::MetricSeries::COUNTER, 2);
  ASSERT_TRUE(r.Merge(c, m).ok());
  r.OnClientGone(c, "exited");
  std::string page = Render(r);
  EXPECT_EQ(page.find("ray_g{"), std::string::npos) << page;
  EXPECT_NE(page.find("ray_c_total{"), std::string::npos) << page;
}

TEST(MetricsRegistryTest, AMalformedReportIsRefusedWhole) {
  MetricsRegistry r("h", "s");
  Client c = MakeClient("\x0a");
  rpc::MetricsReport m;
  *m.add_series() = Series("fine", rpc::MetricSeries::GAUGE, 1);
  *m.add_series() = Series("9bad name", rpc::MetricSeries::GAUGE, 1);
  EXPECT_FALSE(r.Merge(c, m).ok());
  rpc::MetricsReport h;
  *h.add_series() = Series("hist", rpc::MetricSeries::HISTOGRAM, 1);  // no buckets
  EXPECT_FALSE(r.Merge(c, h).ok());
  rpc::MetricsReport keys;
  auto s = Series("k", rpc::MetricSeries::GAUGE, 1, {{"a", "1"}});
  s.add_tag_keys("unpaired");
  *keys.add_series() = s;
  EXPECT_FALSE(r.Merge(c, keys).ok());
  EXPECT_EQ(r.num_series(), 0u);
}

TEST(MetricsRegistryTest, NewSeriesPastTheLimitAreNotKeptAndGoneClientsMakeRoom) {
  MetricsRegistry r("h", "s");
  Client a = MakeClient("\x0b"), b = MakeClient("\x0c");
  rpc::MetricsReport m;
  for (size_t i = 0; i < MetricsRegistry::kMaxSeries; ++i) {
    *m.add_series() = Series("c", rpc::MetricSeries::COUNTER, 1, {{"i", std::to_string(i)}});
  }
  ASSERT_TRUE(r.Merge(a, m).ok());
  EXPECT_EQ(r.num_series(), MetricsRegistry::kMaxSeries);
  rpc::MetricsReport one;
  *one.add_series() = Series("d", rpc::MetricSeries::COUNTER, 1);
  ASSERT_TRUE(r.Merge(b, one).ok());
  EXPECT_EQ(Render(r).find("ray_d_total"), std::string::npos);  // full: not kept
  r.OnClientGone(a, "exited");
  ASSERT_TRUE(r.Merge(b, one).ok());
  EXPECT_NE(Render(r).find("ray_d_total"), std::string::npos);  // the oldest gone series made room
  EXPECT_EQ(r.num_series(), MetricsRegistry::kMaxSeries);
}

class FixedPage : public MetricsSource {
 public:
  std::string RenderMetrics() override { return "# TYPE ray_up gauge\nray_up 1\n"; }
};

TEST(MetricsExporterTest, RespondsToGetMetricsAndAsksForTheTokenOffLoopback) {
  FixedPage page;
  std::string ok = MetricsExporter::Respond("GET /metrics HTTP/1.1\r\nHost: x\r\n", "", &page);
  EXPECT_EQ(ok.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << ok;
  EXPECT_NE(ok.find("text/plain; version=0.0.4"), std::string::npos);
  EXPECT_NE(ok.find("\r\n\r\n# TYPE ray_up gauge\nray_up 1\n"), std::string::npos);
  std::string no = MetricsExporter::Respond("GET /metrics HTTP/1.1\r\nHost: x\r\n", "sekrit", &page);
  EXPECT_EQ(no.rfind("HTTP/1.1 401", 0), 0u) << no;
  EXPECT_EQ(no.find("ray_up"), std::string::npos);
  std::string wrong = MetricsExporter::Respond("GET /metrics HTTP/1.1\r\nAuthorization: Bearer sekriT\r\n", "sekrit", &page);
  EXPECT_EQ(wrong.rfind("HTTP/1.1 401", 0), 0u);
  std::string right = MetricsExporter::Respond("GET /metrics HTTP/1.1\r\nauthorization: Bearer sekrit\r\n", "sekrit", &page);
  EXPECT_EQ(right.rfind("HTTP/1.1 200", 0), 0u) << right;
  EXPECT_EQ(MetricsExporter::Respond("POST /metrics HTTP/1.1\r\n", "", &page).rfind("HTTP/1.1 405", 0), 0u);
  EXPECT_EQ(MetricsExporter::Respond("GET /other HTTP/1.1\r\n", "", &page).rfind("HTTP/1.1 404", 0), 0u);
  EXPECT_EQ(MetricsExporter::Respond("garbage", "", &page).rfind("HTTP/1.1 400", 0), 0u);
}

TEST(MetricsExporterTest, ServesAScrapeOverASocket) {
  asio::io_context io;
  FixedPage page;
  MetricsExporter exporter(io, &page, "token");
  ASSERT_TRUE(exporter.Listen("127.0.0.1", 0).ok());
  EXPECT_TRUE(exporter.loopback());  // (no token asked on loopback)
  std::thread server([&] { io.run_for(std::chrono::seconds(10)); });  // (stopped once the client has its answer)
  std::string got;
  {
    asio::io_context cio;
    asio::ip::tcp::socket s(cio);
    s.connect({asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(exporter.port())});
    std::string req = "GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n";
    asio::write(s, asio::buffer(req));
    boost::system::error_code ec;
    char buf[4096];
    for (;;) {  // until the server closes the connection
      size_t n = s.read_some(asio::buffer(buf), ec);
      if (ec) break;
      got.append(buf, n);
    }
  }
  io.stop();
  server.join();
  EXPECT_NE(got.find("HTTP/1.1 200 OK"), std::string::npos) << got;
  EXPECT_NE(got.find("ray_up 1"), std::string::npos) << got;
  exporter.Stop();
}

}  // namespace
}  // namespace phalanx::scheduler
