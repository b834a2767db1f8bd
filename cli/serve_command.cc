#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>

#include "engine/engine.h"
#include "model/model_directory.h"
#include "server/access_control.h"
#include "cli/commands.h"
#include "server/engine_loop.h"
#include "server/grpc_call_counts.h"
#include "server/grpc_service.h"
#include "server/http/http_api.h"
#include "server/metrics_http.h"

namespace tpserve {
namespace {

constexpr size_t kGrpcMessageBackstopFactor = 16;

struct ServeOptions {
  ModelSource model;
  std::string host = "127.0.0.1";
  int port = 50051;
  int metrics_port = 9090;
  int drain_seconds = 30;
  int failure_exit_seconds = 5;  // engine failed: NOT_SERVING for this long, then exit kEngineFailedExit
  size_t max_request_bytes = 1 << 20;  // Generate requests: checked and counted by the service
  int max_new_tokens = 4096;           // a request's max_tokens cap
  std::string metrics_host = "127.0.0.1";
  AccessOptions access;
  // Connection limits, safe on the open internet (gRPC's own defaults are unlimited or hours).
  int max_concurrent_streams = 128;      // per connection (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS)
  int keepalive_time_ms = 60000;         // ping a connection idle this long...
  int keepalive_timeout_ms = 20000;      // ...and close it if the ping is not answered in this long
  int max_connection_idle_ms = 600000;   // close a connection without calls for this long
  // The OpenAI-compatible HTTP API (off unless --http-port is given).
  std::optional<int> http_port;
  std::string served_model_name;  // default: the model directory's name
  std::string chat_template;      // a Jinja file replacing the model's chat template
  int http_threads = 2;              // event-loop threads; connections are not bound to threads
  int http_max_connections = 8192;
  int http_timeout_s = 10;
  std::vector<std::string> allowed_origins;  // CORS; empty: off
  EngineOptions engine;
  EngineLoopOptions loop;
};

// The name /v1 requests must ask for: --served-model-name, else the model directory's name.
std::string ServedModelName(const ServeOptions& options) {
  if (!options.served_model_name.empty()) return options.served_model_name;
  const std::filesystem::path path = std::filesystem::path(options.model.model).lexically_normal();
  const std::string name = path.has_filename() ? path.filename().string() : path.parent_path().filename().string();
  return name.empty() ? options.model.model : name;
}

// --chat-template FILE, else the model's (tokenizer_config.json); nullopt when there is none.
Result<std::optional<ChatTemplate>> ChooseChatTemplate(const ServeOptions& options, const ModelDirectory& model) {
  if (options.chat_template.empty()) return LoadChatTemplate(model.tokenizer_dir);
  std::ifstream in(options.chat_template, std::ios::binary);
  if (!in) return NotFound("--chat-template: cannot read " + options.chat_template);
  const std::string source((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string bos = model.config.bos_token_id ? model.tokenizer.IdToToken(*model.config.bos_token_id).value_or("") : "";
  const std::string eos =
      model.config.eos_token_ids.empty() ? "" : model.tokenizer.IdToToken(model.config.eos_token_ids.front()).value_or("");
  auto compiled = ChatTemplate::Compile(source, bos, eos);
  if (!compiled.ok()) return InvalidArgument(options.chat_template + ": " + compiled.status().message());
  return std::optional<ChatTemplate>(std::move(compiled).value());
}

// The methods this server offers, as gRPC names them: the labels of tpserve_grpc_server_handled_total.
std::vector<std::string> KnownMethods() {
  std::vector<std::string> methods = {"/grpc.health.v1.Health/Check", "/grpc.health.v1.Health/Watch",
                                      "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"};
  const google::protobuf::ServiceDescriptor* service =
      v1::GenerateRequest::descriptor()->file()->FindServiceByName("TpServe");
  for (int i = 0; service && i < service->method_count(); ++i) {
    methods.push_back("/" + service->full_name() + "/" + service->method(i)->name());
  }
  return methods;
}

// The exit status of a server whose engine failed, for the supervisor to restart it (distinct
// from 1, a start-up error).
constexpr int kEngineFailedExit = 3;

// After --drain-seconds, cancelling what is left and closing every connection gets this long; then
// the process ends whatever still runs (docs/API.md, "Shutdown"). Of it, gRPC calls whose requests
// were cancelled get kGrpcFinishGrace to deliver their last message before they are cut.
constexpr auto kShutdownMargin = std::chrono::seconds(2);
constexpr auto kGrpcFinishGrace = std::chrono::seconds(1);

// What the shutdown is waiting for, for the deadline's log line (process-lifetime: the deadline's
// thread may outlive Run). nullptr once exit() has begun: spdlog may be gone by then.
std::atomic<const char*> shutdown_step{"draining"};

// Ends the process at `at` unless the shutdown has by then. Some waits cannot be interrupted: an
// HTTP event-loop thread parsing and tokenizing a large request, a gRPC handler, an engine step, a
// destructor. No destructors run (a thread still working may use what they would free), and the
// status is 0 as for any drain: what ran past the drain was cancelled.
void ExitAtShutdownDeadline(std::chrono::steady_clock::time_point at) {
  std::atexit([] { shutdown_step = nullptr; });  // runs before spdlog's registry is destroyed
  std::thread([at] {
    std::this_thread::sleep_until(at);
    if (const char* step = shutdown_step.load()) {
      spdlog::warn("serve: still {} {} s after the drain: exiting now", step,
                   std::chrono::duration_cast<std::chrono::seconds>(kShutdownMargin).count());
      spdlog::default_logger()->flush();
      std::fflush(nullptr);
    }
    std::_Exit(0);
  }).detach();
}

// SIGTERM and SIGINT are blocked in every thread and taken by one thread of their own. Until the
// server serves (while the model loads and a multi-process group forms) and in a follower, nothing
// needs draining: the process exits at once with 128 + the signal, so that a member stuck joining
// its group still ends on SIGTERM. Once serving, Wait() returns the signal and the server drains.
class SignalWatch {
 public:
  // Process-lifetime: its thread may still wait in sigwait when Run returns.
  static SignalWatch& Start(const sigset_t& signals) {
    static SignalWatch* watch = new SignalWatch(signals);
    return *watch;
  }
  void Serving() { serving_ = true; }
  int Wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    arrived_.wait(lock, [&] { return signal_ != 0; });
    return signal_;
  }

 private:
  explicit SignalWatch(sigset_t signals) {
    std::thread([this, signals] {
      int signal = 0;
      sigwait(&signals, &signal);
      if (!serving_) {
        spdlog::info("received {} before serving: exiting", signal == SIGTERM ? "SIGTERM" : "SIGINT");
        spdlog::default_logger()->flush();
        std::_Exit(128 + signal);
      }
      {
        std::lock_guard<std::mutex> lock(mutex_);
        signal_ = signal;
      }
      arrived_.notify_all();
    }).detach();
  }

  std::atomic<bool> serving_{false};
  std::mutex mutex_;
  std::condition_variable arrived_;
  int signal_ = 0;
};

// Every open connection (gRPC, HTTP, metrics) is a file descriptor: use all the hard limit allows.
void RaiseOpenFileLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= limit.rlim_max) return;
  limit.rlim_cur = limit.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &limit) != 0) spdlog::warn("serve: cannot raise the open-file limit");
}

int Run(const ServeOptions& options) {
  RaiseOpenFileLimit();
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);  // before any thread starts
  SignalWatch& signal_watch = SignalWatch::Start(signals);
  std::signal(SIGPIPE, SIG_IGN);  // a client that hangs up is an error on its write, not the end of the server

  auto model = OpenModel(options.model);
  if (!model.ok()) {
    spdlog::error("serve: {}", model.status().ToString());
    return 1;
  }
  auto access = AccessControl::Create(options.access);
  if (!access.ok()) {
    spdlog::error("serve: {}", access.status().message());
    return 1;
  }
  EngineLoopOptions loop_options = options.loop;
  if (loop_options.max_model_len <= 0 || loop_options.max_model_len > model->config.max_position_embeddings) {
    loop_options.max_model_len = model->config.max_position_embeddings;
  }
  // The engine's step limits are the scheduler's: its steps never hold more than
  // --max-batched-tokens tokens (decode rows included) or --max-batch-size sequences, nor reach
  // past --max-model-len; the CUDA backend sizes its step buffers for no more.
  EngineOptions engine_options = options.engine;
  engine_options.max_step_tokens = loop_options.scheduler.max_batched_tokens;
  engine_options.max_step_sequences = loop_options.scheduler.max_batch_size;
  engine_options.max_context = loop_options.max_model_len;
  auto engine = CreateEngineOnDevice(*model, engine_options);
  if (!engine.ok()) {
    spdlog::error("serve: {}", engine.status().ToString());
    return 1;
  }
  if ((*engine)->follower()) return RunFollowerUntilShutdown("serve", **engine);
  ServerMetrics metrics;
  metrics.group_size = (*engine)->group_size();
  metrics.group_members_connected = [e = engine->get()] { return e->group_members_connected(); };
  EngineLoop loop(engine->get(), &model->tokenizer, loop_options, &metrics);
  ServiceLimits limits{.max_model_len = loop_options.max_model_len,
                       .max_request_bytes = options.max_request_bytes,
                       .max_new_tokens = options.max_new_tokens};
  TpServeService service(&*model, &loop, engine->get(), &metrics, loop_options, limits, &*access);
  std::optional<ChatTemplate> chat_template;
  std::unique_ptr<HttpApi> http;
  if (options.http_port) {
    auto chosen = ChooseChatTemplate(options, *model);
    if (!chosen.ok()) {
      spdlog::error("serve: {} (give --chat-template FILE to use another)", chosen.status().message());
      return 1;
    }
    chat_template = std::move(chosen).value();
    if (!chat_template) spdlog::warn("serve: the model has no chat template: /v1/chat/completions answers 400");
    http = std::make_unique<HttpApi>(&*model, chat_template ? &*chat_template : nullptr, &loop, &service, &*access,
                                     &metrics,
                                     HttpApiOptions{.host = options.host,
                                                    .port = *options.http_port,
                                                    .served_model_name = ServedModelName(options),
                                                    .threads = options.http_threads,
                                                    .max_connections = options.http_max_connections,
                                                    .read_timeout_s = options.http_timeout_s,
                                                    .keepalive_timeout_s = std::min(options.http_timeout_s, 5),
                                                    .max_request_bytes = options.max_request_bytes,
                                                    .tls = options.access,
                                                    .allowed_origins = options.allowed_origins});
  }

  GrpcCallCounts grpc_calls(KnownMethods());
  // First: nothing to unwind if its port is taken.
  MetricsHttpServer metrics_http([&] { return metrics.RenderPrometheus() + grpc_calls.RenderPrometheus(); });
  auto metrics_port = metrics_http.Start(options.metrics_host, options.metrics_port);
  if (!metrics_port.ok()) {
    spdlog::error("serve: {}", metrics_port.status().message());
    return 1;
  }
  grpc::EnableDefaultHealthCheckService(true);
  // Reflection cannot check the API key (it is gRPC's own service): with a key it is off.
  if (!access->requires_key()) grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int grpc_port = 0;
  builder.AddListeningPort(options.host + ":" + std::to_string(options.port), access->Credentials(), &grpc_port);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, options.max_concurrent_streams);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, options.keepalive_time_ms);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, options.keepalive_timeout_ms);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS, options.max_connection_idle_ms);
  // gRPC's own limit is a backstop well above the service's: a refusal by gRPC reaches no handler
  // and so no metric, while the service's names the size and is counted.
  builder.SetMaxReceiveMessageSize(static_cast<int>(kGrpcMessageBackstopFactor * options.max_request_bytes));
  builder.RegisterService(&service);
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(grpc_calls.MakeInterceptorFactory());
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || grpc_port == 0) {
    spdlog::error("serve: cannot listen on {}:{}", options.host, options.port);
    return 1;
  }
  std::string http_ready;
  if (http) {
    auto http_port = http->Start();
    if (!http_port.ok()) {
      spdlog::error("serve: {}", http_port.status().message());
      server->Shutdown();
      return 1;
    }
    http_ready = fmt::format(" http {}:{}", options.host, *http_port);
  }
  loop.Start();
  server->GetHealthCheckService()->SetServingStatus(true);
  spdlog::info("serving {} ({}, tp={}, {} KV blocks of {} tokens in {}, max batch {}, max queue {})",
               model->path, model->config.architecture_name, engine_options.tp,
               (*engine)->block_pool().total_blocks(), (*engine)->block_size(),
               cpu::KvDtypeName(engine_options.kv_cache_dtype),
               loop_options.scheduler.max_batch_size, loop_options.max_queue);
  spdlog::info("access: {}, {}", access->tls() ? "TLS" : "plaintext (no TLS)",
               access->requires_key() ? "API key required (reflection off)" : "no API key");
  signal_watch.Serving();  // from here a signal drains (tests and scripts stop the server once it says ready)
  spdlog::info("tpserve ready: grpc {}:{} metrics {}:{}{}", options.host, grpc_port, options.metrics_host,
               *metrics_port, http_ready);

  // Engine health is reflected in grpc.health.v1 while we wait for a signal. A failed engine
  // cannot be repaired in place (a stalled rank thread cannot be stopped safely): NOT_SERVING at
  // once, so probes and load balancers see it, then exit for the supervisor to restart us.
  std::atomic<bool> stopping{false};
  std::thread health([&] {
    std::optional<std::chrono::steady_clock::time_point> failed_at;
    while (!stopping) {
      if (!loop.healthy() && !failed_at) {
        failed_at = std::chrono::steady_clock::now();
        server->GetHealthCheckService()->SetServingStatus(false);
        spdlog::error("serve: the engine failed ({}); NOT_SERVING, exiting with status {} in {} s",
                      (*engine)->failure().message(), kEngineFailedExit, options.failure_exit_seconds);
      }
      if (failed_at && std::chrono::steady_clock::now() - *failed_at >= std::chrono::seconds(options.failure_exit_seconds)) {
        spdlog::error("serve: exiting after the engine failure");
        spdlog::default_logger()->flush();
        std::fflush(nullptr);
        std::_Exit(kEngineFailedExit);  // no destructors: a stuck rank thread may hold what they would free
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(failed_at ? 20 : 100));
    }
  });
  const int signal = signal_watch.Wait();
  spdlog::info("received {}: draining (up to {} s)", signal == SIGTERM ? "SIGTERM" : "SIGINT",
               options.drain_seconds);
  server->GetHealthCheckService()->SetServingStatus(false);
  service.StartDraining();
  if (http) http->StartDraining();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(options.drain_seconds);
  ExitAtShutdownDeadline(deadline + kShutdownMargin);
  // In flight: the engine's requests, and HTTP requests admitted before the signal whose bodies are
  // still arriving or being tokenized.
  const auto in_flight = [&] { return loop.in_flight() + (http ? http->requests_in_progress() : 0); };
  while (in_flight() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const int abandoned = in_flight();
  shutdown_step = "stopping the engine loop";
  loop.Stop();  // cancels whatever is left, after the step it is in
  shutdown_step = "closing the gRPC calls";
  server->Shutdown(std::chrono::system_clock::now() + kGrpcFinishGrace);  // then cancels the rest
  shutdown_step = "closing the HTTP connections (a request is still being parsed or tokenized)";
  if (http) http->Stop();
  stopping = true;
  health.join();
  shutdown_step = "closing the metrics port";
  metrics_http.Stop();
  spdlog::info("stopped ({} requests cancelled at the end of the drain)", abandoned);
  shutdown_step = "freeing the engine";
  return 0;
}

}  // namespace

void AddServeCommand(CLI::App& app, CommandAction* action) {
  auto options = std::make_shared<ServeOptions>();
  CLI::App* cmd = app.add_subcommand(
      "serve",
      "Serve completions over gRPC (tpserve.v1.TpServe, grpc.health.v1, reflection) with\n"
      "continuous batching, and Prometheus metrics over HTTP. SIGTERM drains and exits 0.");
  AddModelFlags(cmd, &options->model);
  cmd->add_option("--host", options->host, "Address to listen on (loopback by default)")->capture_default_str();
  cmd->add_option("--port", options->port, "gRPC port (0: pick a free one)")->capture_default_str();
  cmd->add_option("--metrics-port", options->metrics_port, "HTTP /metrics port (0: pick a free one)")
      ->capture_default_str();
  cmd->add_option("--metrics-host", options->metrics_host,
                  "Address of the /metrics endpoint (loopback by default; 0.0.0.0 inside a pod for Prometheus)")
      ->capture_default_str();
  cmd->add_option("--api-key-file", options->access.api_key_file,
                  "Every call must send 'authorization: Bearer KEY' with the key in this file (health stays open)");
  cmd->add_option("--tls-cert", options->access.tls_cert, "Serve gRPC over TLS with this certificate (PEM file)");
  cmd->add_option("--tls-key", options->access.tls_key, "The certificate's private key (PEM file)");
  cmd->add_option("--tls-client-ca", options->access.tls_client_ca,
                  "Require client certificates signed by this CA (PEM file; mutual TLS)");
  cmd->add_option("--max-new-tokens", options->max_new_tokens,
                  "Largest max_tokens a request may ask for (0: up to --max-model-len)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--max-concurrent-streams", options->max_concurrent_streams, "Concurrent calls per connection")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--keepalive-time-ms", options->keepalive_time_ms, "Ping a connection idle this long")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--keepalive-timeout-ms", options->keepalive_timeout_ms, "Close it if the ping is unanswered this long")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--max-connection-idle-ms", options->max_connection_idle_ms,
                  "Close a connection that has had no call for this long")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--http-port", options->http_port,
                  "Serve the OpenAI-compatible HTTP API (/v1/completions, /v1/chat/completions, /v1/models, "
                  "/health) on this port of --host (0: pick a free one; off when not given)")
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--served-model-name", options->served_model_name,
                  "The model name HTTP requests must use (default: the model directory's name)");
  cmd->add_option("--chat-template", options->chat_template,
                  "A Jinja chat template file used instead of the model's tokenizer_config.json chat_template");
  cmd->add_option("--allowed-origins", options->allowed_origins,
                  "CORS: origins whose web pages may call the HTTP API (e.g. https://app.example.com; * for any). "
                  "Off by default: no Access-Control-* headers, OPTIONS is 404")
      ->delimiter(',');
  cmd->add_option("--http-threads", options->http_threads,
                  "Event-loop threads of the HTTP API: they read every request and write every response (an open "
                  "stream or a slow client holds no thread)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--http-max-connections", options->http_max_connections,
                  "Open HTTP connections at most; more are closed as they are accepted (each needs a file "
                  "descriptor: serve raises its soft limit to the hard one)")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  cmd->add_option("--http-timeout-s", options->http_timeout_s,
                  "An HTTP client that stalls this long while sending a request or reading a response is cut off "
                  "(idle keep-alive connections: at most 5 s)")
      ->check(CLI::Range(1, 3600))
      ->capture_default_str();
  AddEngineFlags(cmd, &options->engine);
  AddSchedulerFlags(cmd, &options->loop);
  cmd->add_option("--max-request-bytes", options->max_request_bytes,
                  "Largest Generate request accepted (RESOURCE_EXHAUSTED beyond, counted in the metrics)")
      ->check(CLI::Range(size_t{64}, size_t{64} << 20))->capture_default_str();
  cmd->add_option("--drain-seconds", options->drain_seconds,
                  "On SIGTERM, how long in-flight requests may finish (new ones are refused); then the rest are "
                  "cancelled, every connection is closed and the process exits 0 within 2 s more, whatever the "
                  "clients do")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--failure-exit-seconds", options->failure_exit_seconds,
                  "After an engine failure (in-flight requests get UNAVAILABLE), report NOT_SERVING for this "
                  "long, then exit with status 3 for the supervisor to restart the server")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->callback([options, action] { *action = [options] { return Run(*options); }; });
}

}  // namespace tpserve
