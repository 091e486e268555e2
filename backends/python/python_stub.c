/* Starting, talking to and stopping one python stub process
 * (python_stub.h). */
#define _GNU_SOURCE
#include "python_stub.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "osprey/clock.h"
#include "osprey/log.h"
#include "python_bls.h"
#include "python_bls_async.h"
#include "python_metrics.h"
#include "python_protocol.h"

extern char **environ;

/* The fds the stub finds its channel, region and doorbell on. */
enum { STUB_CONTROL_FD = 3, STUB_REGION_FD = 4, STUB_DOORBELL_FD = 5 };

/* Moves *fd (close-on-exec) above the fds the stub expects, so the
 * child's dup2 onto 3, 4 and 5 cannot clobber a source fd. */
static osp_error *move_above_stub_fds(int *fd) {
    if (*fd > STUB_DOORBELL_FD)
        return NULL;
    int moved = fcntl(*fd, F_DUPFD_CLOEXEC, STUB_DOORBELL_FD + 1);
    if (moved < 0)
        return osp_error_new(OSP_ERROR_UNAVAILABLE, "python backend: fcntl: %s",
                             strerror(errno));
    close(*fd);
    *fd = moved;
    return NULL;
}

osp_error *pystub_start(pystub *stub, const pystub_options *options) {
    int sv[2] = {-1, -1};
    osp_error *err = NULL;
    stub->pid = 0;
    stub->control = -1;
    stub->max_frame = pyproto_frame_max(options->shm_limit);
    if (options->doorbell_fd > 0 && options->doorbell_fd <= STUB_DOORBELL_FD)
        return osp_error_new(OSP_ERROR_INTERNAL,
                             "python backend: the doorbell must lie above fd "
                             "%d",
                             STUB_DOORBELL_FD);
    if ((err = pyshm_region_init(&stub->region, options->shm_initial,
                                 options->shm_growth, options->shm_limit)))
        return err;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        err = osp_error_new(OSP_ERROR_UNAVAILABLE,
                            "python backend: socketpair: %s", strerror(errno));
        goto out;
    }
    /* The dup2s below must not overwrite one another's source. */
    if ((err = move_above_stub_fds(&sv[1])) ||
        (err = move_above_stub_fds(&stub->region.fd)))
        goto out;
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, sv[1], STUB_CONTROL_FD);
    posix_spawn_file_actions_adddup2(&actions, stub->region.fd, STUB_REGION_FD);
    if (options->doorbell_fd > 0)
        posix_spawn_file_actions_adddup2(&actions, options->doorbell_fd,
                                         STUB_DOORBELL_FD);
    /* Nothing else of the server's (listening sockets, other stubs'
     * channels) reaches the stub. */
    posix_spawn_file_actions_addclosefrom_np(
        &actions,
        (options->doorbell_fd > 0 ? STUB_DOORBELL_FD : STUB_REGION_FD) + 1);
    char *argv[] = {(char *)options->python, (char *)options->stub_script,
                    NULL};
    pid_t pid = 0;
    int rc = posix_spawnp(&pid, options->python, &actions, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) {
        /* The path stays in the server log: replies never carry one. */
        OSP_LOG_ERROR("python backend: cannot start '%s': %s", options->python,
                      strerror(rc));
        err = osp_error_new(OSP_ERROR_UNAVAILABLE,
                            "python backend: cannot start the Python "
                            "executable (python-executable or "
                            "EXECUTION_ENV_PATH): %s",
                            strerror(rc));
        goto out;
    }
    stub->pid = pid;
    stub->control = sv[0];
    sv[0] = -1;
out:
    if (sv[0] >= 0)
        close(sv[0]);
    if (sv[1] >= 0)
        close(sv[1]);
    if (err)
        pyshm_region_destroy(&stub->region);
    return err;
}

/* Kills (if still running) and reaps the stub and closes what the server
 * holds of it. */
void pystub_kill(pystub *stub) {
    if (stub->bls)
        pybls_outbox_forget_stub(stub->bls); /* no one to answer */
    pymetrics_free(stub->metrics);
    stub->metrics = NULL;
    if (stub->pid > 0) {
        kill(stub->pid, SIGKILL);
        while (waitpid(stub->pid, NULL, 0) < 0 && errno == EINTR)
            ;
    }
    stub->pid = 0;
    if (stub->control >= 0)
        close(stub->control);
    stub->control = -1;
    pyshm_region_destroy(&stub->region);
}

/* Writes one LOG frame's message into the server log. */
static void stub_log(const pystub *stub, const uint8_t *payload, size_t len) {
    uint32_t level = 0;
    if (len < 4)
        return;
    memcpy(&level, payload, 4);
    const char *text = (const char *)payload + 4;
    switch (level) {
    case 1:
        OSP_LOG_WARN("%s", text);
        break;
    case 2:
        OSP_LOG_ERROR("%s", text);
        break;
    case 3:
        OSP_LOG_VERBOSE("%s", text);
        break;
    default:
        OSP_LOG_INFO("%s", text);
    }
    (void)stub;
}

/* Serves a METRIC frame and sends its answer; false when the stub broke
 * the protocol or is gone. */
static bool serve_metric(pystub *stub, const uint8_t *payload, size_t len) {
    if (!stub->metrics && !(stub->metrics = pymetrics_new()))
        return false;
    pyproto_text answer = {0};
    osp_error *err = pymetrics_serve(stub->metrics, payload, len, &answer);
    bool ok = !err && (answer.len == 0 ||
                       pystub_send(stub, PYPROTO_CALL_ANSWER, answer.data,
                                   answer.len));
    if (err) {
        OSP_LOG_ERROR("%s: %s", stub->name, osp_error_message(err));
        osp_error_free(err);
    }
    pyproto_text_free(&answer);
    return ok;
}

/* Answers IS_CANCELLED: whether request `index` of the batch the stub
 * names has lost its client (false once that batch was answered). */
static bool serve_is_cancelled(pystub *stub, const uint8_t *payload,
                               size_t len) {
    uint64_t call, batch;
    uint32_t index;
    if (len != 20)
        return false;
    memcpy(&call, payload, 8);
    memcpy(&batch, payload + 8, 8);
    memcpy(&index, payload + 16, 4);
    const osp_batch_request *request =
        stub->exec_ctx && batch == stub->exec_batch
            ? osp_execute_request(stub->exec_ctx, index)
            : NULL;
    bool cancelled = request && osp_cancel_token_is_cancelled(request->cancel);
    pyproto_text answer = {0};
    pyproto_append_call_answer(&answer, call, NULL, cancelled ? 1.0 : 0.0);
    bool sent = !answer.failed && pystub_send(stub, PYPROTO_CALL_ANSWER,
                                              answer.data, answer.len);
    pyproto_text_free(&answer);
    return sent;
}

pystub_frame_status pystub_serve_frame(pystub *stub, uint32_t type,
                                       const uint8_t *payload, size_t len) {
    if (type == PYPROTO_LOG) {
        stub_log(stub, payload, len);
        return PYSTUB_FRAME_SERVED;
    }
    if (type == PYPROTO_BLS_CALL && stub->bls) {
        pybls_call_start(stub->bls, stub->server, stub->name, payload, len);
        return PYSTUB_FRAME_SERVED;
    }
    if (type == PYPROTO_METRIC)
        return serve_metric(stub, payload, len) ? PYSTUB_FRAME_SERVED
                                                : PYSTUB_FRAME_BROKEN;
    if (type == PYPROTO_IS_CANCELLED)
        return serve_is_cancelled(stub, payload, len) ? PYSTUB_FRAME_SERVED
                                                      : PYSTUB_FRAME_BROKEN;
    if (type == PYPROTO_BLS_CANCEL && stub->bls) {
        pybls_call_cancel(stub->bls, payload, len);
        return PYSTUB_FRAME_SERVED;
    }
    if (type != PYPROTO_BLS)
        return PYSTUB_FRAME_OTHER;
    bool sent;
    if (stub->bls) {
        sent = pybls_region_call_start(stub->bls, stub, payload, len);
    } else {
        pybls_gathered refused = {
            .error = osp_error_new(OSP_ERROR_UNAVAILABLE,
                                   "BLS is only supported during the "
                                   "'execute' function.")};
        sent = pybls_send_gathered(stub, &refused);
        osp_error_free(refused.error);
    }
    return sent ? PYSTUB_FRAME_SERVED : PYSTUB_FRAME_BROKEN;
}

bool pystub_send(pystub *stub, uint32_t type, const void *payload, size_t len) {
    if (stub->control < 0)
        return false;
    if (stub->send_lock)
        pthread_mutex_lock(stub->send_lock);
    bool sent = pyproto_send(stub->control, type, payload, len);
    if (stub->send_lock)
        pthread_mutex_unlock(stub->send_lock);
    return sent;
}

/* Waits until a frame begins on the channel or the deadline (0: none)
 * passes; while BLS calls are in flight it sends their answers as they
 * come. Without calls the frame's own read does the waiting. */
static pyproto_recv_status wait_for_frame(pystub *stub, uint64_t deadline_ns) {
    while (stub->bls && pybls_outbox_busy(stub->bls)) {
        struct pollfd pfd[2] = {
            {.fd = stub->control, .events = POLLIN},
            {.fd = pybls_outbox_wake_fd(stub->bls), .events = POLLIN}};
        int timeout = -1;
        if (deadline_ns) {
            uint64_t now = osp_now_ns();
            if (now >= deadline_ns)
                return PYPROTO_RECV_TIMEOUT;
            timeout = (int)((deadline_ns - now + 999999) / 1000000);
        }
        int ready = poll(pfd, 2, timeout);
        if (ready < 0 && errno != EINTR)
            return PYPROTO_RECV_CLOSED;
        if (ready > 0 && (pfd[1].revents & POLLIN) &&
            !pybls_outbox_flush(stub->bls, stub))
            return PYPROTO_RECV_CLOSED;
        if (ready > 0 && pfd[0].revents)
            return PYPROTO_RECV_OK;
    }
    return PYPROTO_RECV_OK;
}

pystub_call_status pystub_call(pystub *stub, uint32_t type, const void *payload,
                               size_t len, uint64_t deadline_ns,
                               uint32_t *reply_type, uint8_t **reply,
                               size_t *reply_len) {
    if (stub->control < 0)
        return PYSTUB_DEAD;
    if (!pystub_send(stub, type, payload, len)) {
        pystub_kill(stub);
        return PYSTUB_DEAD;
    }
    for (;;) {
        uint32_t got = 0;
        uint8_t *buf = NULL;
        size_t n = 0;
        pyproto_recv_status st = wait_for_frame(stub, deadline_ns);
        if (st == PYPROTO_RECV_OK)
            st = pyproto_recv(stub->control, deadline_ns, stub->max_frame, &got,
                              &buf, &n);
        if (st != PYPROTO_RECV_OK) {
            pystub_kill(stub);
            return st == PYPROTO_RECV_TIMEOUT ? PYSTUB_TIMED_OUT : PYSTUB_DEAD;
        }
        pystub_frame_status served = pystub_serve_frame(stub, got, buf, n);
        if (served != PYSTUB_FRAME_OTHER) {
            free(buf);
            if (served == PYSTUB_FRAME_BROKEN) {
                pystub_kill(stub);
                return PYSTUB_DEAD;
            }
            continue;
        }
        /* A stub answers once its region call is answered; one that did
         * not must not have it write into the region of the next EXEC.
         * Inline calls go on: their answers wait in the outbox. */
        if (stub->bls)
            pybls_outbox_drop_region_call(stub->bls);
        *reply_type = got;
        *reply = buf;
        *reply_len = n;
        return PYSTUB_ANSWERED;
    }
}

void pystub_stop(pystub *stub, int timeout_ms) {
    if (stub->control >= 0 && stub->pid > 0) {
        uint32_t type = 0;
        uint8_t *reply = NULL;
        size_t len = 0;
        uint64_t deadline = osp_now_ns() + (uint64_t)timeout_ms * 1000000u;
        if (pystub_call(stub, PYPROTO_FINALIZE, NULL, 0, deadline, &type,
                        &reply, &len) == PYSTUB_ANSWERED) {
            free(reply);
            /* The stub exits after answering; give it until the deadline
             * before the kill below. */
            close(stub->control);
            stub->control = -1;
            while (osp_now_ns() < deadline) {
                pid_t r = waitpid(stub->pid, NULL, WNOHANG);
                if (r == stub->pid || (r < 0 && errno != EINTR)) {
                    stub->pid = 0;
                    break;
                }
                usleep(1000);
            }
        }
    }
    pystub_kill(stub);
}

osp_error *pystub_unhealthy_error(const pystub *stub) {
    return osp_error_new(OSP_ERROR_INTERNAL,
                         "Stub process '%s' is not healthy.", stub->name);
}
