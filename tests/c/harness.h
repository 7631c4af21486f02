/* A tiny harness for the C interface tests: a trace of events and a way to
 * wait for a root flow to end. */
#ifndef HARNESS_H
#define HARNESS_H

#include "futoin_asyncsteps.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char trace_buf[4096];
static pthread_mutex_t trace_mx = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t done_mx = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t done_cv = PTHREAD_COND_INITIALIZER;
static int done_flag;
static char done_code[64];
static int failures;

static void trace(const char* fmt, ...)
{
    pthread_mutex_lock(&trace_mx);
    size_t n = strlen(trace_buf);
    if (n > 0 && n + 1 < sizeof(trace_buf)) {
        trace_buf[n++] = ' ';
        trace_buf[n] = 0;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(trace_buf + n, sizeof(trace_buf) - n, fmt, ap);
    va_end(ap);
    pthread_mutex_unlock(&trace_mx);
}

static void signal_done(const char* code)
{
    pthread_mutex_lock(&done_mx);
    snprintf(done_code, sizeof(done_code), "%s", code);
    done_flag = 1;
    pthread_cond_signal(&done_cv);
    pthread_mutex_unlock(&done_mx);
}

static void on_unhandled(FutoInAsyncSteps* bsi, void* data, const char* code)
{
    (void)bsi;
    (void)data;
    signal_done(code);
}

static void last_step(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)bsi;
    (void)data;
    (void)args;
    signal_done("ok");
}

/* Adds a last step that reports "ok", executes the root, waits for its end
 * and returns "ok" or the unhandled error code. */
static const char* run_root(FutoInAsyncSteps* root, int add_last)
{
    if (add_last) {
        root->api->add(root, NULL, last_step, NULL);
    }
    pthread_mutex_lock(&done_mx);
    done_flag = 0;
    pthread_mutex_unlock(&done_mx);
    root->api->execute(root, NULL, on_unhandled);
    pthread_mutex_lock(&done_mx);
    while (!done_flag) {
        pthread_cond_wait(&done_cv, &done_mx);
    }
    pthread_mutex_unlock(&done_mx);
    return done_code;
}

static void reset_trace(void)
{
    pthread_mutex_lock(&trace_mx);
    trace_buf[0] = 0;
    pthread_mutex_unlock(&trace_mx);
}

static void expect(const char* test, const char* got, const char* want)
{
    if (strcmp(got, want) != 0) {
        fprintf(stderr, "FAIL %s\n  got:  %s\n  want: %s\n", test, got, want);
        failures++;
    } else {
        printf("ok %s\n", test);
    }
}

#endif
