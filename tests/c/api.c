/* C interface tests: every test builds a root, runs it on a 2-loop
 * runtime and compares the trace of events with the exact expected one. */
#include "harness.h"

static FutoInRuntime* rt;

/* ------------------------------------------------ values helpers */
static FutoInType T_I32 = {FTN_TYPE_INT32, NULL};
static void set_i32(FutoInBinaryValue* v, int32_t x)
{
    v->type = &T_I32;
    v->i32 = x;
}
static FutoInType T_STR = {FTN_TYPE_STRING, NULL};
static void set_str(FutoInBinaryValue* v, const char* s, uint32_t len)
{
    v->type = &T_STR;
    v->cstr = s;
    v->length = len;
}

/* ------------------------------------------------ 1. order and args */
static void a2(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)data;
    trace("A2 %d %s", args->arg0.i32, args->arg1.cstr);
    FutoInArgs out = {0};
    set_i32(&out.arg0, 2);
    bsi->api->success(bsi, &out);
}
static void a1(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)data;
    (void)args;
    trace("A1");
    FutoInArgs out = {0};
    set_i32(&out.arg0, 1);
    set_str(&out.arg1, "xyz", 1);
    bsi->api->success(bsi, &out);
    if (out.arg0.type != NULL || out.arg1.type != NULL) {
        trace("args-not-reset");
    }
}
static void step_a(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)data;
    (void)args;
    trace("A");
    bsi->api->add(bsi, NULL, a1, NULL);
    bsi->api->add(bsi, NULL, a2, NULL);
}
static void step_b(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)bsi;
    (void)data;
    trace("B %d type=%d", args->arg0.i32, args->arg0.type->flags);
}
static void test_order(void)
{
    reset_trace();
    FutoInAsyncSteps* r = futoin_asyncsteps_new(rt);
    r->api->add(r, NULL, step_a, NULL);
    r->api->add(r, NULL, step_b, NULL);
    expect("order.result", run_root(r, 1), "ok");
    expect("order.trace", trace_buf, "A A1 A2 1 x B 2 type=8");
    r->api->free(r);
}

/* ------------------------------------------------ 2. errors */
static void raise_step(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)data;
    (void)args;
    trace("raise");
    bsi->api->handle_error(bsi, "MyError", "the info");
    const char* info = bsi->api->stateVariable(bsi, NULL, "error_info", NULL, NULL);
    trace("info=%s", info ? info : "(null)");
}
static void in_handler(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)bsi;
    (void)data;
    (void)args;
    trace("handler-step");
}
static void recover(FutoInAsyncSteps* bsi, void* data, const char* code)
{
    const char* info = bsi->api->stateVariable(bsi, NULL, "error_info", NULL, NULL);
    trace("eh %s %s", code, info ? info : "(null)");
    if (data) {
        bsi->api->add(bsi, NULL, in_handler, NULL);
        return;
    }
    FutoInArgs out = {0};
    set_i32(&out.arg0, 7);
    bsi->api->success(bsi, &out);
}
static void after_recover(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)bsi;
    (void)data;
    if (args->arg0.type) {
        trace("next %d", args->arg0.i32);
    } else {
        trace("next");
    }
}
static void test_errors(void)
{
    reset_trace();
    FutoInAsyncSteps* r = futoin_asyncsteps_new(rt);
    r->api->add(r, NULL, raise_step, recover);
    r->api->add(r, NULL, after_recover, NULL);
    expect("error.recover", run_root(r, 1), "ok");
    expect("error.recover.trace", trace_buf,
            "raise info=the info eh MyError the info next 7");
    r->api->free(r);

    /* steps added in a handler run on the failed step's level */
    reset_trace();
    r = futoin_asyncsteps_new(rt);
    r->api->add(r, (void*)1, raise_step, recover);
    r->api->add(r, NULL, after_recover, NULL);
    expect("error.handler_adds", run_root(r, 1), "ok");
    expect("error.handler_adds.trace", trace_buf,
            "raise info=the info eh MyError the info handler-step next");
    r->api->free(r);

    /* unhandled: reaches execute's callback */
    reset_trace();
    r = futoin_asyncsteps_new(rt);
    r->api->add(r, NULL, raise_step, NULL);
    r->api->add(r, NULL, after_recover, NULL);
    expect("error.unhandled", run_root(r, 1), "MyError");
    expect("error.unhandled.trace", trace_buf, "raise info=the info");
    r->api->free(r);
}

/* ------------------------------------------------ 3. stack */
static void stack_cleanup(void* p)
{
    trace("cleanup %d", *(int*)p);
}
static void stack_step(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)data;
    (void)args;
    int* p = bsi->api->stack(bsi, sizeof(int) * 4, stack_cleanup);
    trace("zeroed=%d", p[0] == 0 && p[3] == 0);
    *p = 5;
    bsi->api->add(bsi, NULL, in_handler, NULL);
}
static void test_stack(void)
{
    reset_trace();
    FutoInAsyncSteps* r = futoin_asyncsteps_new(rt);
    r->api->add(r, NULL, stack_step, NULL);
    r->api->add(r, NULL, after_recover, NULL);
    expect("stack", run_root(r, 1), "ok");
    expect("stack.trace", trace_buf, "zeroed=1 handler-step cleanup 5 next");
    r->api->free(r);
}

/* ------------------------------------------------ 4. loops */
static int iter;
static void inner_body(FutoInAsyncSteps* bsi, void* data, size_t i)
{
    (void)data;
    trace("r%zu", i);
    if (i == 1) {
        bsi->api->continueLoop(bsi, "inner");
        return;
    }
    if (i == 2 && iter == 2) {
        bsi->api->breakLoop(bsi, "outer");
        return;
    }
    if (i == 3) {
        bsi->api->breakLoop(bsi, NULL);
    }
}
static void outer_body(FutoInAsyncSteps* bsi, void* data)
{
    (void)data;
    trace("o%d", iter++);
    bsi->api->repeat(bsi, NULL, 10, inner_body, "inner");
}
static void loop_step(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)data;
    (void)args;
    iter = 0;
    bsi->api->loop(bsi, NULL, outer_body, "outer");
}
static void bad_break(FutoInAsyncSteps* bsi, void* data, size_t i)
{
    (void)data;
    (void)i;
    bsi->api->breakLoop(bsi, "nowhere");
}
static void bad_break_step(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)data;
    (void)args;
    bsi->api->repeat(bsi, NULL, 3, bad_break, NULL);
}
static void trace_code(FutoInAsyncSteps* bsi, void* data, const char* code)
{
    (void)bsi;
    (void)data;
    trace("eh %s", code);
}
static void test_loops(void)
{
    reset_trace();
    FutoInAsyncSteps* r = futoin_asyncsteps_new(rt);
    r->api->add(r, NULL, loop_step, NULL);
    r->api->add(r, NULL, after_recover, NULL);
    expect("loops", run_root(r, 1), "ok");
    expect("loops.trace", trace_buf, "o0 r0 r1 r2 r3 o1 r0 r1 r2 next");
    r->api->free(r);

    reset_trace();
    r = futoin_asyncsteps_new(rt);
    r->api->add(r, NULL, bad_break_step, trace_code);
    expect("loops.unmatched_label", run_root(r, 1), "LoopBreak");
    expect("loops.unmatched_label.trace", trace_buf, "eh LoopBreak");
    r->api->free(r);
}

/* ------------------------------------------------ 5. parallel, timers */
static void par_b1(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)bsi;
    (void)data;
    (void)args;
    trace("b1");
}
static void par_b2(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)bsi;
    (void)data;
    (void)args;
    trace("b2");
}
static void par_step(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)data;
    (void)args;
    FutoInAsyncSteps* p = bsi->api->parallel(bsi, NULL, NULL);
    p->api->add(p, NULL, par_b1, NULL);
    p->api->add(p, NULL, par_b2, NULL);
}
static void fail_later(void* data)
{
    FutoInAsyncSteps* bsi = data;
    bsi->api->handle_error(bsi, "E1", "late");
}
static void par_fail1(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)data;
    (void)args;
    trace("f1");
    bsi->api->waitExternal(bsi);
    bsi->api->sched_deferred(bsi, 5, bsi, fail_later);
}
static void cancel_cb(FutoInAsyncSteps* bsi, void* data)
{
    (void)bsi;
    trace("cancel %s", (const char*)data);
}
static void par_wait2(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)data;
    (void)args;
    trace("f2");
    bsi->api->setCancel(bsi, "f2", cancel_cb);
}
static void par_fail_step(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)data;
    (void)args;
    FutoInAsyncSteps* p = bsi->api->parallel(bsi, NULL, trace_code);
    p->api->add(p, NULL, par_fail1, NULL);
    p->api->add(p, NULL, par_wait2, NULL);
}
static void timeout_step(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)data;
    (void)args;
    bsi->api->setCancel(bsi, "timeout", cancel_cb);
    bsi->api->setTimeout(bsi, 5);
}
static void test_parallel_timeout(void)
{
    reset_trace();
    FutoInAsyncSteps* r = futoin_asyncsteps_new(rt);
    r->api->add(r, NULL, par_step, NULL);
    r->api->add(r, NULL, after_recover, NULL);
    expect("parallel", run_root(r, 1), "ok");
    expect("parallel.trace", trace_buf, "b1 b2 next");
    r->api->free(r);

    reset_trace();
    r = futoin_asyncsteps_new(rt);
    r->api->add(r, NULL, par_fail_step, NULL);
    expect("parallel.error", run_root(r, 1), "E1");
    expect("parallel.error.trace", trace_buf, "f1 f2 cancel f2 eh E1");
    r->api->free(r);

    reset_trace();
    r = futoin_asyncsteps_new(rt);
    r->api->add(r, NULL, timeout_step, trace_code);
    expect("timeout", run_root(r, 1), "Timeout");
    expect("timeout.trace", trace_buf, "cancel timeout eh Timeout");
    r->api->free(r);
}

/* ------------------------------------------------ 6. foreign thread */
static void* complete_from_thread(void* p)
{
    FutoInAsyncSteps* bsi = p;
    FutoInArgs out = {0};
    set_i32(&out.arg0, 42);
    bsi->api->success(bsi, &out);
    return NULL;
}
static void thread_step(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)data;
    (void)args;
    bsi->api->waitExternal(bsi);
    pthread_t t;
    pthread_create(&t, NULL, complete_from_thread, bsi);
    pthread_detach(t);
}
static void test_thread(void)
{
    reset_trace();
    FutoInAsyncSteps* r = futoin_asyncsteps_new(rt);
    r->api->add(r, NULL, thread_step, NULL);
    r->api->add(r, NULL, after_recover, NULL);
    expect("thread", run_root(r, 1), "ok");
    expect("thread.trace", trace_buf, "next 42");
    r->api->free(r);
}

/* ------------------------------------------------ 7. foreign sync */
typedef struct
{
    FutoInSync base;
} MySync;
static void my_lock(FutoInAsyncSteps* bsi, FutoInSync* s)
{
    (void)bsi;
    (void)s;
    trace("lock");
}
static void my_unlock(FutoInAsyncSteps* bsi, FutoInSync* s)
{
    (void)bsi;
    (void)s;
    trace("unlock");
}
static const FutoInSyncAPI my_sync_api = {{{my_lock, my_unlock}}};
static void section(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    trace("section %d", args->arg0.type ? args->arg0.i32 : -1);
    if (data) {
        bsi->api->handle_error(bsi, "InSection", NULL);
    }
}
static void give_5(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)data;
    (void)args;
    FutoInArgs out = {0};
    set_i32(&out.arg0, 5);
    bsi->api->success(bsi, &out);
}
static void test_foreign_sync(void)
{
    MySync s = {{&my_sync_api}};
    reset_trace();
    FutoInAsyncSteps* r = futoin_asyncsteps_new(rt);
    r->api->add(r, NULL, give_5, NULL);
    r->api->addSync(r, &s.base, NULL, section, NULL);
    r->api->add(r, NULL, after_recover, NULL);
    expect("foreign_sync", run_root(r, 1), "ok");
    expect("foreign_sync.trace", trace_buf, "lock section 5 unlock next");
    r->api->free(r);

    reset_trace();
    r = futoin_asyncsteps_new(rt);
    r->api->addSync(r, &s.base, (void*)1, section, NULL);
    expect("foreign_sync.error", run_root(r, 1), "InSection");
    expect("foreign_sync.error.trace", trace_buf, "lock section -1 unlock");
    r->api->free(r);
}

/* ------------------------------------------------ 8. our sync */
static FutoInSync* mutex;
static int inside, max_inside;
static void leave_later(void* data)
{
    FutoInAsyncSteps* bsi = data;
    pthread_mutex_lock(&trace_mx);
    inside--;
    pthread_mutex_unlock(&trace_mx);
    bsi->api->success(bsi, NULL);
}
static void guarded(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)data;
    (void)args;
    pthread_mutex_lock(&trace_mx);
    if (++inside > max_inside) {
        max_inside = inside;
    }
    pthread_mutex_unlock(&trace_mx);
    bsi->api->waitExternal(bsi);
    bsi->api->sched_deferred(bsi, 2, bsi, leave_later);
}
static int n_done;
static void count_done(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)bsi;
    (void)data;
    (void)args;
    pthread_mutex_lock(&done_mx);
    n_done++;
    pthread_cond_signal(&done_cv);
    pthread_mutex_unlock(&done_mx);
}
static void test_mutex(void)
{
    mutex = futoin_mutex_new(1, UINT32_MAX);
    FutoInAsyncSteps* roots[4];
    n_done = 0;
    for (int i = 0; i < 4; i++) {
        roots[i] = futoin_asyncsteps_new(rt);
        roots[i]->api->addSync(roots[i], mutex, NULL, guarded, NULL);
        roots[i]->api->add(roots[i], NULL, count_done, NULL);
        roots[i]->api->execute(roots[i], NULL, NULL);
    }
    pthread_mutex_lock(&done_mx);
    while (n_done < 4) {
        pthread_cond_wait(&done_cv, &done_mx);
    }
    pthread_mutex_unlock(&done_mx);
    char buf[64];
    snprintf(buf, sizeof(buf), "max_inside=%d", max_inside);
    expect("mutex", buf, "max_inside=1");
    for (int i = 0; i < 4; i++) {
        roots[i]->api->free(roots[i]);
    }
    futoin_sync_free(mutex);
}

/* ------------------------------------------------ 9. bad input */
static FutoInAsyncSteps* saved;
static FutoInType T_BAD = {0x7F, NULL};
static void bad_step(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)args;
    int what = (int)(intptr_t)data;
    FutoInArgs out = {0};
    switch (what) {
    case 0:
        bsi->api->add(bsi, NULL, NULL, NULL);
        break;
    case 1:
        bsi->api->success(bsi, NULL);
        bsi->api->success(bsi, NULL);
        break;
    case 2:
        bsi->api->handle_error(bsi, NULL, NULL);
        break;
    case 3:
        out.arg0.type = &T_BAD;
        bsi->api->success(bsi, &out);
        break;
    case 4:
        bsi->api->execute(bsi, NULL, NULL);
        break;
    case 5:
        bsi->api->free(bsi); /* a no-op on a step */
        saved = bsi;
        break;
    }
}
static void use_saved(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)bsi;
    (void)data;
    (void)args;
    trace("valid=%d", saved->api->isValid(saved));
    saved->api->success(saved, NULL); /* stale: a no-op */
    saved->api->handle_error(saved, "Stale", NULL);
}
static void report_info(FutoInAsyncSteps* bsi, void* data, const char* code)
{
    (void)data;
    const char* info = bsi->api->stateVariable(bsi, NULL, "error_info", NULL, NULL);
    trace("%s: %s", code, info ? info : "(null)");
}
static void test_bad_input(void)
{
    const char* want[] = {
            "InternalError: add(): the execute callback is NULL",
            "InternalError: success() called twice in the same step",
            "InternalError: handle_error(): code: NULL",
            "InternalError: args: slot 0: unknown type flags 0x7f",
            "InternalError: execute(): only a root can be executed, not a step",
    };
    for (int i = 0; i < 5; i++) {
        reset_trace();
        FutoInAsyncSteps* r = futoin_asyncsteps_new(rt);
        r->api->add(r, (void*)(intptr_t)i, bad_step, report_info);
        char name[32];
        snprintf(name, sizeof(name), "bad_input.%d", i);
        expect(name, run_root(r, 1), "InternalError");
        expect(name, trace_buf, want[i]);
        r->api->free(r);
    }
    reset_trace();
    FutoInAsyncSteps* r = futoin_asyncsteps_new(rt);
    r->api->add(r, (void*)5, bad_step, NULL);
    r->api->add(r, NULL, use_saved, NULL);
    expect("bad_input.stale", run_root(r, 1), "ok");
    expect("bad_input.stale.trace", trace_buf, "valid=0");
    r->api->free(r);

    /* NULL handles and calls meant for steps on a root */
    r = futoin_asyncsteps_new(rt);
    r->api->add(NULL, NULL, NULL, NULL);
    r->api->free(NULL);
    reset_trace();
    r->api->waitExternal(r);
    r->api->add(r, NULL, after_recover, report_info);
    expect("bad_input.root_misuse", run_root(r, 1), "InternalError");
    r->api->free(r);
    expect("bad_input.null_rt", futoin_asyncsteps_new(NULL) == NULL ? "null" : "?", "null");
}

int main(void)
{
    rt = futoin_runtime_new(2);
    if (!rt) {
        fprintf(stderr, "no runtime\n");
        return 2;
    }
    test_order();
    test_errors();
    test_stack();
    test_loops();
    test_parallel_timeout();
    test_thread();
    test_foreign_sync();
    test_mutex();
    test_bad_input();
    futoin_runtime_free(rt);
    printf("%d failures\n", failures);
    return failures ? 1 : 0;
}
