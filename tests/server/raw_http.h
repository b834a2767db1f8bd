// HTTP/1.1 spoken byte by byte over raw loopback sockets, for tests that must send what no
// well-behaved client library would (bad framing, slow or pipelined requests, huge heads) and see
// exactly what the server answers and when it closes.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <fstream>
#include <string>
#include <string_view>

namespace tpserve::testing {

// A TCP connection to 127.0.0.1:port, with a receive timeout; -1 when it cannot connect.
inline int Connect(int port, int receive_timeout_s = 15) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    close(fd);
    return -1;
  }
  timeval timeout{.tv_sec = receive_timeout_s, .tv_usec = 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  return fd;
}

// Sends all of `bytes`; false when the server closed or reset the connection first.
inline bool SendAll(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n <= 0) return false;
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// Whether the connection has something to read (a response, or its end) within `timeout_ms`.
inline bool Readable(int fd, int timeout_ms) {
  pollfd p{.fd = fd, .events = POLLIN, .revents = 0};
  return poll(&p, 1, timeout_ms) == 1;
}

// Whether the server closes `fd` (reads until EOF, discarding any response) within the receive
// timeout.
inline bool ServerCloses(int fd) {
  char buffer[4096];
  for (;;) {
    const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n == 0) return true;
    if (n < 0) return false;  // timed out (or reset, which also counts as not a clean cut-off)
  }
}

struct RawResponse {
  int status = 0;    // 0: no complete response arrived
  std::string head;  // status line and headers
  std::string body;  // de-chunked
  std::string Header(std::string_view name) const {
    std::string lower_head = head;
    std::transform(lower_head.begin(), lower_head.end(), lower_head.begin(), ::tolower);
    std::string key = "\r\n" + std::string(name) + ":";
    std::transform(key.begin(), key.end(), key.begin(), ::tolower);
    const size_t at = lower_head.find(key);
    if (at == std::string::npos) return "";
    const size_t from = head.find_first_not_of(' ', at + key.size());
    return head.substr(from, head.find("\r\n", from) - from);
  }
};

// Reads responses from `fd` one at a time, keeping what arrived after one for the next (so
// pipelined responses are read in order).
class ResponseReader {
 public:
  explicit ResponseReader(int fd) : fd_(fd) {}

  RawResponse Next() {
    RawResponse r;
    size_t head_end;
    while ((head_end = pending_.find("\r\n\r\n")) == std::string::npos) {
      if (!Fill()) return r;
    }
    r.head = pending_.substr(0, head_end + 2);
    pending_.erase(0, head_end + 4);
    if (r.head.rfind("HTTP/1.1 ", 0) != 0 || r.head.size() < 12) return r;
    const int status = std::stoi(r.head.substr(9, 3));
    if (r.Header("Transfer-Encoding") == "chunked") {
      for (;;) {
        size_t line_end;
        while ((line_end = pending_.find("\r\n")) == std::string::npos) {
          if (!Fill()) return r;
        }
        const size_t size = std::stoul(pending_.substr(0, line_end), nullptr, 16);
        while (pending_.size() < line_end + 2 + size + 2) {
          if (!Fill()) return r;
        }
        r.body += pending_.substr(line_end + 2, size);
        pending_.erase(0, line_end + 2 + size + 2);
        if (size == 0) break;
      }
    } else {
      const std::string length = r.Header("Content-Length");
      const size_t size = length.empty() ? 0 : std::stoul(length);
      while (pending_.size() < size) {
        if (!Fill()) return r;
      }
      r.body = pending_.substr(0, size);
      pending_.erase(0, size);
    }
    r.status = status;
    return r;
  }

 private:
  bool Fill() {
    char buffer[16384];
    const ssize_t n = recv(fd_, buffer, sizeof(buffer), 0);
    if (n <= 0) return false;
    pending_.append(buffer, static_cast<size_t>(n));
    return true;
  }

  int fd_;
  std::string pending_;
};

// One request on a new connection, and its response (status 0 when none came).
inline RawResponse Exchange(int port, std::string_view request) {
  const int fd = Connect(port);
  RawResponse response;
  if (fd >= 0 && SendAll(fd, request)) response = ResponseReader(fd).Next();
  if (fd >= 0) close(fd);
  return response;
}

// The server's thread count (/proc/PID/status).
inline int Threads(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  }
  return -1;
}

// The server's resident memory in KiB (/proc/PID/status).
inline long ResidentKiB(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

}  // namespace tpserve::testing
