#include "tcp_ring.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace dn {

TcpRingCollective::TcpRingCollective(int rank, int size, int send_fd, int recv_fd, int timeout_ms)
    : rank_(rank), size_(size), send_fd_(send_fd), recv_fd_(recv_fd), timeout_ms_(timeout_ms) {
    if (size < 1 || rank < 0 || rank >= size)
        throw DarknetError("TcpRingCollective: rank " + std::to_string(rank) + " of " + std::to_string(size));
    if (timeout_ms <= 0) throw DarknetError("TcpRingCollective: timeout_ms must be positive");
    for (int fd : {send_fd_, recv_fd_})
        if (fd >= 0) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

TcpRingCollective::~TcpRingCollective() {
    if (send_fd_ >= 0) close(send_fd_);
    if (recv_fd_ >= 0 && recv_fd_ != send_fd_) close(recv_fd_);
}

void TcpRingCollective::fail(const std::string& what, int peer) const {
    throw CollectiveError("rank " + std::to_string(rank_) + ": " + what + " rank " + std::to_string(peer));
}

void TcpRingCollective::exchange(const char* send, size_t send_bytes, char* recv, size_t recv_bytes) {
    const int next = (rank_ + 1) % size_, prev = (rank_ - 1 + size_) % size_;
    size_t sent = 0, got = 0;
    while (sent < send_bytes || got < recv_bytes) {
        pollfd fds[2];
        int n = 0, send_at = -1, recv_at = -1;
        if (sent < send_bytes) fds[send_at = n++] = {send_fd_, POLLOUT, 0};
        if (got < recv_bytes) fds[recv_at = n++] = {recv_fd_, POLLIN, 0};
        int r = poll(fds, n, timeout_ms_);
        if (r < 0) {
            if (errno == EINTR) continue;  // a signal: Python checks it after the collective
            fail(std::string("poll failed (") + std::strerror(errno) + ") talking to", next);
        }
        if (r == 0) {
            std::string secs = std::to_string(timeout_ms_ / 1000.0).substr(0, 5);
            if (got < recv_bytes)
                fail("no data for " + secs + " s (hung, or stuck far behind?) from", prev);
            fail("could not send for " + secs + " s (hung, or stuck far behind?) to", next);
        }
        if (send_at >= 0 && fds[send_at].revents) {
            ssize_t w = ::send(send_fd_, send + sent, send_bytes - sent, MSG_NOSIGNAL);
            if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                fail(std::string("lost the connection (") + std::strerror(errno) + "; it died or stopped) to", next);
            if (w > 0) sent += (size_t)w;
        }
        if (recv_at >= 0 && fds[recv_at].revents) {
            ssize_t g = ::recv(recv_fd_, recv + got, recv_bytes - got, 0);
            if (g == 0) fail("connection closed (it died or stopped) by", prev);
            if (g < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                fail(std::string("lost the connection (") + std::strerror(errno) + "; it died or stopped) from", prev);
            if (g > 0) got += (size_t)g;
        }
    }
}

void TcpRingCollective::all_reduce_sum(float* data, size_t n) {
    if (size_ == 1 || n == 0) return;
    if (busy_.exchange(true))
        throw DarknetError("rank " + std::to_string(rank_) + ": an all-reduce started while another was running "
                           "(finish the gradient reduction first): the ranks would mix their operations");
    struct Idle {
        std::atomic<bool>& busy;
        ~Idle() { busy = false; }
    } idle{busy_};
    const size_t N = (size_t)size_;
    auto begin = [&](size_t c) { return n * c / N; };  // chunk c: [begin(c), begin(c + 1))
    auto count = [&](size_t c) { return begin(c + 1) - begin(c); };
    scratch_.resize(n / N + 1);
    const size_t r = (size_t)rank_;
    // reduce-scatter: after step s, chunk (r - s - 1) holds the sum of s + 2 ranks; at the end rank r
    // holds chunk (r + 1)'s full sum
    for (size_t s = 0; s + 1 < N; ++s) {
        size_t out = (r + N - s) % N, in = (r + N - s - 1) % N;
        exchange((const char*)(data + begin(out)), count(out) * 4, (char*)scratch_.data(), count(in) * 4);
        float* dst = data + begin(in);
        for (size_t i = 0, m = count(in); i < m; ++i) dst[i] += scratch_[i];
    }
    // all-gather: the full sums travel round the ring, copied as they are
    for (size_t s = 0; s + 1 < N; ++s) {
        size_t out = (r + 1 + N - s) % N, in = (r + N - s) % N;
        exchange((const char*)(data + begin(out)), count(out) * 4, (char*)(data + begin(in)), count(in) * 4);
    }
}

}  // namespace dn
