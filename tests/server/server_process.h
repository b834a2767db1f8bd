// Starts the real `tpserve serve` on loopback (ports picked by the OS) and waits for its ready
// line; stops it with SIGTERM. For integration tests that talk to it over real gRPC and HTTP.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "tests/test_paths.h"

namespace tpserve::testing {

class ServerProcess {
 public:
  // Returns false (with the log in `log()`) if the server did not become ready in time.
  bool Start(const std::vector<std::string>& args) {
    int pipe_fds[2];
    if (pipe(pipe_fds) != 0) return false;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(pipe_fds[1], STDERR_FILENO);
      close(pipe_fds[0]);
      std::vector<char*> argv;
      static std::string binary = testing::TpserveBinary();
      argv.push_back(binary.data());
      static std::vector<std::string> storage;
      storage = args;
      for (auto& a : storage) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(binary.c_str(), argv.data());
      _exit(127);
    }
    close(pipe_fds[1]);
    stderr_fd_ = pipe_fds[0];
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    const std::regex ready(R"(tpserve ready: grpc ([0-9.]+):(\d+) metrics ([0-9.]+):(\d+)( http ([0-9.]+):(\d+))?)");
    std::smatch match;
    while (std::chrono::steady_clock::now() < deadline) {
      char buffer[4096];
      const ssize_t n = read(stderr_fd_, buffer, sizeof(buffer));
      if (n <= 0) break;
      log_.append(buffer, n);
      if (std::regex_search(log_, match, ready)) {
        grpc_target_ = match[1].str() + ":" + match[2].str();
        metrics_port_ = std::stoi(match[4].str());
        if (match[7].matched) http_port_ = std::stoi(match[7].str());
        // Keep draining stderr so the server never blocks on a full pipe.
        drain_ = std::thread([this] {
          char b[4096];
          ssize_t k;
          while ((k = read(stderr_fd_, b, sizeof(b))) > 0) {
            std::lock_guard<std::mutex> lock(log_mutex_);
            log_.append(b, k);
          }
        });
        return true;
      }
    }
    return false;
  }

  // SIGTERM, then the exit status (or -1 after the timeout).
  int Stop(int timeout_s = 60) {
    SendSigterm();
    return Wait(timeout_s);
  }

  void SendSigterm() {
    if (pid_ > 0) kill(pid_, SIGTERM);
  }

  // The exit status once the process has exited (or -1 after the timeout, when it is killed).
  int Wait(int timeout_s = 60) {
    if (pid_ <= 0) return -1;
    int status = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
    while (waitpid(pid_, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &status, 0);
        pid_ = -1;
        return -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    pid_ = -1;
    if (drain_.joinable()) drain_.join();
    close(stderr_fd_);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

  ~ServerProcess() { Stop(); }

  const std::string& grpc_target() const { return grpc_target_; }
  pid_t pid() const { return pid_; }
  int metrics_port() const { return metrics_port_; }
  int http_port() const { return http_port_; }  // 0 without --http-port
  std::string log() {
    std::lock_guard<std::mutex> lock(log_mutex_);
    return log_;
  }

 private:
  pid_t pid_ = -1;
  int stderr_fd_ = -1;
  std::string grpc_target_;
  int metrics_port_ = 0;
  int http_port_ = 0;
  std::mutex log_mutex_;
  std::string log_;
  std::thread drain_;
};

}  // namespace tpserve::testing
