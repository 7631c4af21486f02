/* More C interface tests: state variables, the AsyncTool entries, root ids
 * and new instances, values of every kind, sync objects, and cancel and
 * completion from threads that run no loop. Every case compares a trace or
 * a set of counters with the exact expected one. Nothing sleeps: events are
 * awaited (with a generous bound, so a missing one fails instead of
 * hanging), and the order checks rely only on the documented ordering. */
#define _POSIX_C_SOURCE 200809L
#include "harness.h"

#include <errno.h>
#include <stdint.h>
#include <time.h>

static FutoInRuntime* rt;

/* ------------------------------------------------ events and counters */
static pthread_mutex_t ev_mx = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ev_cv = PTHREAD_COND_INITIALIZER;

static void bump(int* c)
{
    pthread_mutex_lock(&ev_mx);
    (*c)++;
    pthread_cond_broadcast(&ev_cv);
    pthread_mutex_unlock(&ev_mx);
}

static int count_of(const int* c)
{
    pthread_mutex_lock(&ev_mx);
    int v = *c;
    pthread_mutex_unlock(&ev_mx);
    return v;
}

/* Waits until *c reaches n (at most 10 s: a missing event fails the case
 * instead of hanging the program); returns *c. */
static int wait_count(const int* c, int n)
{
    struct timespec until;
    timespec_get(&until, TIME_UTC);
    until.tv_sec += 10;
    pthread_mutex_lock(&ev_mx);
    while (*c < n) {
        if (pthread_cond_timedwait(&ev_cv, &ev_mx, &until) == ETIMEDOUT) {
            break;
        }
    }
    int v = *c;
    pthread_mutex_unlock(&ev_mx);
    return v;
}

static const char* str_or_null(const char* s)
{
    return s ? s : "(null)";
}

static const FutoInType T_I32 = {FTN_TYPE_INT32, NULL};

/* ================================================ 1. state variables */
typedef struct
{
    int allocs;
    int cleanups;
    int wrong; /* cleanup got a value this tag's allocate did not make */
    void* value;
} SvTag;

static int sv_serial; /* values made so far */
static int sv_cleanups; /* cleanups of every tag */

static void* sv_alloc(void* data)
{
    SvTag* t = data;
    int* v = malloc(sizeof(int));
    pthread_mutex_lock(&ev_mx);
    *v = ++sv_serial;
    t->allocs++;
    t->value = v;
    pthread_mutex_unlock(&ev_mx);
    return v;
}

static void sv_cleanup(void* data, void* value)
{
    SvTag* t = data;
    pthread_mutex_lock(&ev_mx);
    if (value != t->value) {
        t->wrong++;
    }
    t->cleanups++;
    sv_cleanups++;
    pthread_cond_broadcast(&ev_cv);
    pthread_mutex_unlock(&ev_mx);
    free(value);
}

typedef struct
{
    SvTag x, y, z;
    void* px;
} SvFlow;

static SvFlow sv_flows[2];
static SvTag sv_unexecuted;

static void* sv_get(FutoInAsyncSteps* bsi, SvTag* t, const char* name)
{
    return bsi->api->stateVariable(bsi, t, name, sv_alloc, sv_cleanup);
}

static void* sv_value(SvTag* t)
{
    pthread_mutex_lock(&ev_mx);
    void* v = t->value;
    pthread_mutex_unlock(&ev_mx);
    return v;
}

static void sv_sub(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)args;
    SvFlow* f = data;
    trace("sub x=%d", sv_get(bsi, &f->x, "x") == f->px);
}

static void sv_branch(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)args;
    SvFlow* f = data;
    trace("branch x=%d", sv_get(bsi, &f->x, "x") == f->px);
}

static void sv_s1(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)args;
    SvFlow* f = data;
    f->px = sv_get(bsi, &f->x, "x");
    void* py = sv_get(bsi, &f->y, "y");
    /* "z" was made on the root before execute(): the steps see that one */
    void* pz = sv_get(bsi, &f->z, "z");
    trace("s1 x=%d y=%d z=%d",
            f->px != NULL && f->px == sv_value(&f->x),
            py != NULL && py == sv_value(&f->y),
            pz != NULL && pz == sv_value(&f->z));
    bsi->api->add(bsi, f, sv_sub, NULL);
}

static void sv_s2(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)args;
    SvFlow* f = data;
    /* without allocate: the existing value */
    void* py = bsi->api->stateVariable(bsi, NULL, "y", NULL, NULL);
    /* a name never set, without allocate: NULL */
    void* none = bsi->api->stateVariable(bsi, NULL, "unset", NULL, NULL);
    trace("s2 x=%d y=%d unset=%s", sv_get(bsi, &f->x, "x") == f->px,
            py == sv_value(&f->y), none ? "?" : "NULL");
    FutoInAsyncSteps* p = bsi->api->parallel(bsi, NULL, NULL);
    p->api->add(p, f, sv_branch, NULL);
    p->api->add(p, f, sv_branch, NULL);
}

static void sv_counts(char* buf, size_t n, SvFlow* f)
{
    pthread_mutex_lock(&ev_mx);
    snprintf(buf, n, "allocs=%d%d%d cleanups=%d%d%d wrong=%d%d%d", f->x.allocs,
            f->y.allocs, f->z.allocs, f->x.cleanups, f->y.cleanups,
            f->z.cleanups, f->x.wrong, f->y.wrong, f->z.wrong);
    pthread_mutex_unlock(&ev_mx);
}

static void sv_s3(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)bsi;
    (void)args;
    char buf[128];
    sv_counts(buf, sizeof(buf), data);
    trace("s3 %s", buf);
}

static void test_state(void)
{
    for (int i = 0; i < 2; i++) {
        SvFlow* f = &sv_flows[i];
        char name[64], buf[128];
        int before = count_of(&sv_cleanups);
        reset_trace();
        FutoInAsyncSteps* r = futoin_asyncsteps_new(rt);
        void* pz = r->api->stateVariable(r, &f->z, "z", sv_alloc, sv_cleanup);
        void* pz2 = r->api->stateVariable(r, &f->z, "z", sv_alloc, sv_cleanup);
        r->api->add(r, f, sv_s1, NULL);
        r->api->add(r, f, sv_s2, NULL);
        r->api->add(r, f, sv_s3, NULL);
        snprintf(name, sizeof(name), "state.flow%d", i);
        expect(name, run_root(r, 1), "ok");
        snprintf(name, sizeof(name), "state.flow%d.trace", i);
        expect(name, trace_buf,
                "s1 x=1 y=1 z=1 sub x=1 s2 x=1 y=1 unset=NULL branch x=1 "
                "branch x=1 s3 allocs=111 cleanups=000 wrong=000");
        snprintf(name, sizeof(name), "state.flow%d.root_value", i);
        snprintf(buf, sizeof(buf), "same=%d", pz != NULL && pz == pz2);
        expect(name, buf, "same=1");
        /* the flow ends after its last step: wait for its 3 cleanups */
        wait_count(&sv_cleanups, before + 3);
        snprintf(name, sizeof(name), "state.flow%d.ended", i);
        sv_counts(buf, sizeof(buf), f);
        expect(name, buf, "allocs=111 cleanups=111 wrong=000");
        r->api->free(r);
        snprintf(name, sizeof(name), "state.flow%d.freed", i);
        sv_counts(buf, sizeof(buf), f);
        expect(name, buf, "allocs=111 cleanups=111 wrong=000");
    }

    /* a root that never runs: its cleanup runs when it is freed */
    SvTag* t = &sv_unexecuted;
    FutoInAsyncSteps* r = futoin_asyncsteps_new(rt);
    void* a = r->api->stateVariable(r, t, "w", sv_alloc, sv_cleanup);
    void* b = r->api->stateVariable(r, t, "w", sv_alloc, sv_cleanup);
    char buf[128];
    pthread_mutex_lock(&ev_mx);
    int cleanups_before_free = t->cleanups;
    pthread_mutex_unlock(&ev_mx);
    r->api->free(r);
    pthread_mutex_lock(&ev_mx);
    snprintf(buf, sizeof(buf), "same=%d allocs=%d before_free=%d cleanups=%d wrong=%d",
            a != NULL && a == b, t->allocs, cleanups_before_free, t->cleanups,
            t->wrong);
    pthread_mutex_unlock(&ev_mx);
    expect("state.unexecuted_root", buf,
            "same=1 allocs=1 before_free=0 cleanups=1 wrong=0");
}

/* ------------------------------------------------ error_info, last_exception */
static void ei_show(FutoInAsyncSteps* bsi, const char* what)
{
    /* both read before either is used: each stays valid until the next
     * step runs */
    const char* info = bsi->api->stateVariable(bsi, NULL, "error_info", NULL, NULL);
    const char* last = bsi->api->stateVariable(bsi, NULL, "last_exception", NULL, NULL);
    trace("%s info=%s last=%s", what, str_or_null(info), str_or_null(last));
}

static void ei_before(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)data;
    (void)args;
    ei_show(bsi, "before");
}

static void ei_fail_later(void* data)
{
    FutoInAsyncSteps* bsi = data;
    bsi->api->handle_error(bsi, "ExtError", "ext info");
}

static void ei_fail_later_null(void* data)
{
    FutoInAsyncSteps* bsi = data;
    bsi->api->handle_error(bsi, "ExtNoInfo", NULL);
}

static void ei_external(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)args;
    bsi->api->waitExternal(bsi);
    bsi->api->sched_immediate(bsi, bsi, data ? ei_fail_later_null : ei_fail_later);
}

static void ei_raise(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)data;
    (void)args;
    bsi->api->handle_error(bsi, "NoInfo", NULL);
    /* set at once (last_exception is only promised in the handler) */
    const char* info = bsi->api->stateVariable(bsi, NULL, "error_info", NULL, NULL);
    trace("raised info=%s", str_or_null(info));
}

static void ei_handler(FutoInAsyncSteps* bsi, void* data, const char* code)
{
    (void)data;
    char what[64];
    snprintf(what, sizeof(what), "eh %s", code);
    ei_show(bsi, what);
    bsi->api->success(bsi, NULL);
}

static void ei_next(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)data;
    (void)args;
    ei_show(bsi, "next");
}

static void ei_noop(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)bsi;
    (void)data;
    (void)args;
}

/* making a parallel inside the callback keeps what the callback was given */
static void ei_parallel(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)data;
    (void)args;
    const char* info = bsi->api->stateVariable(bsi, NULL, "error_info", NULL, NULL);
    FutoInAsyncSteps* p = bsi->api->parallel(bsi, NULL, NULL);
    p->api->add(p, NULL, ei_noop, NULL);
    const char* again = bsi->api->stateVariable(bsi, NULL, "error_info", NULL, NULL);
    trace("parallel info=%s same=%d", str_or_null(info), info == again);
}

static void test_error_info(void)
{
    reset_trace();
    FutoInAsyncSteps* r = futoin_asyncsteps_new(rt);
    r->api->add(r, NULL, ei_before, NULL);
    r->api->add(r, NULL, ei_external, ei_handler);
    r->api->add(r, NULL, ei_next, NULL);
    r->api->add(r, NULL, ei_parallel, NULL);
    r->api->add(r, NULL, ei_raise, ei_handler);
    r->api->add(r, NULL, ei_next, NULL);
    /* off the callback, a NULL info stays NULL too */
    r->api->add(r, r, ei_external, ei_handler);
    r->api->add(r, NULL, ei_next, NULL);
    expect("state.error_info", run_root(r, 1), "ok");
    expect("state.error_info.trace", trace_buf,
            "before info=(null) last=(null) "
            "eh ExtError info=ext info last=ExtError "
            "next info=ext info last=ExtError "
            "parallel info=ext info same=1 "
            "raised info=(null) "
            "eh NoInfo info=(null) last=NoInfo "
            "next info=(null) last=NoInfo "
            "eh ExtNoInfo info=(null) last=ExtNoInfo "
            "next info=(null) last=ExtNoInfo");
    r->api->free(r);
}

/* ================================================ 2. AsyncTool entries */
static FutoInHandle sc_imm_h, sc_def_h;

static void sc_imm(void* data)
{
    (void)data;
    trace("imm");
}

static void sc_never(void* data)
{
    (void)data;
    trace("CANCELLED-RAN");
}

static void sc_finish(void* data)
{
    FutoInAsyncSteps* bsi = data;
    trace("finish");
    bsi->api->success(bsi, NULL);
}

static void sc_s1(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)data;
    (void)args;
    const FutoInAsyncStepsAPI* a = bsi->api;
    sc_imm_h = a->sched_immediate(bsi, NULL, sc_imm);
    sc_def_h = a->sched_deferred(bsi, 5, NULL, sc_never);
    int imm = a->sched_is_valid(bsi, &sc_imm_h);
    int def = a->sched_is_valid(bsi, &sc_def_h);
    a->sched_cancel(bsi, &sc_def_h);
    int cancelled = a->sched_is_valid(bsi, &sc_def_h);
    a->sched_cancel(bsi, &sc_def_h); /* twice: harmless */
    FutoInHandle empty;
    memset(&empty, 0, sizeof(empty));
    int e = a->sched_is_valid(bsi, &empty);
    a->sched_cancel(bsi, &empty);
    int n = a->sched_is_valid(bsi, NULL);
    a->sched_cancel(bsi, NULL);
    trace("s1 imm=%d def=%d cancelled=%d empty=%d null=%d same_thread=%d",
            imm, def, cancelled, e, n, a->is_same_thread(bsi));
    /* Completed by a timer due no earlier than the cancelled one and
     * scheduled after it: had the cancelled one run, it ran before. */
    a->waitExternal(bsi);
    a->sched_deferred(bsi, 5, bsi, sc_finish);
}

static void sc_next(void* data)
{
    (void)data;
    trace("next-imm");
}

static void sc_s2(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)data;
    (void)args;
    const FutoInAsyncStepsAPI* a = bsi->api;
    int ran = a->sched_is_valid(bsi, &sc_imm_h);
    FutoInHandle next = a->sched_immediate(bsi, NULL, sc_next);
    /* cancelling handles of callbacks that already ran (or were
     * cancelled) must not touch the new one, whatever slot it got */
    a->sched_cancel(bsi, &sc_imm_h);
    a->sched_cancel(bsi, &sc_def_h);
    trace("s2 ran=%d next=%d", ran, a->sched_is_valid(bsi, &next));
    a->waitExternal(bsi);
    a->sched_immediate(bsi, bsi, sc_finish); /* queued after sc_next */
}

static int root_sched_runs;
static void root_sched_cb(void* data)
{
    (void)data;
    bump(&root_sched_runs);
}

static int is_empty(const FutoInHandle* h)
{
    return h->data1 == NULL && h->data2 == NULL && h->data3 == 0;
}

/* a step's handle used from a thread that runs no loop */
static int ft_empty = -1, ft_valid = -1, ft_same = -1;
static void ft_cb(void* data)
{
    FutoInAsyncSteps* bsi = data;
    trace("cb same_thread=%d", bsi->api->is_same_thread(bsi));
}

static void* ft_thread(void* p)
{
    FutoInAsyncSteps* bsi = p;
    FutoInHandle h = bsi->api->sched_immediate(bsi, bsi, ft_cb);
    ft_empty = is_empty(&h);
    ft_valid = bsi->api->sched_is_valid(bsi, &h);
    ft_same = bsi->api->is_same_thread(bsi);
    /* after the callback was scheduled: both reach the loop in this order */
    bsi->api->success(bsi, NULL);
    return NULL;
}

static void ft_step(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)data;
    (void)args;
    bsi->api->waitExternal(bsi);
    pthread_t t;
    pthread_create(&t, NULL, ft_thread, bsi);
    pthread_detach(t);
}

static void ft_after(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)bsi;
    (void)data;
    (void)args;
    trace("thread empty=%d valid=%d same_thread=%d", ft_empty, ft_valid, ft_same);
}

static void test_sched(void)
{
    reset_trace();
    FutoInAsyncSteps* r = futoin_asyncsteps_new(rt);
    r->api->add(r, NULL, sc_s1, NULL);
    r->api->add(r, NULL, sc_s2, NULL);
    expect("sched.step", run_root(r, 1), "ok");
    expect("sched.step.trace", trace_buf,
            "s1 imm=1 def=1 cancelled=0 empty=0 null=0 same_thread=1 imm "
            "finish s2 ran=0 next=1 next-imm finish");
    r->api->free(r);

    /* on a root, from the main thread: scheduled, but the handle is empty */
    char buf[128];
    r = futoin_asyncsteps_new(rt);
    FutoInHandle h1 = r->api->sched_immediate(r, NULL, root_sched_cb);
    FutoInHandle h2 = r->api->sched_deferred(r, 1, NULL, root_sched_cb);
    int valid = r->api->sched_is_valid(r, &h1) + r->api->sched_is_valid(r, &h2);
    r->api->sched_cancel(r, &h2); /* does nothing for an empty handle */
    int runs = wait_count(&root_sched_runs, 2);
    snprintf(buf, sizeof(buf), "empty=%d%d valid=%d runs=%d same_thread=%d",
            is_empty(&h1), is_empty(&h2), valid, runs, r->api->is_same_thread(r));
    expect("sched.root", buf, "empty=11 valid=0 runs=2 same_thread=0");
    r->api->free(r);

    reset_trace();
    r = futoin_asyncsteps_new(rt);
    r->api->add(r, NULL, ft_step, NULL);
    r->api->add(r, NULL, ft_after, NULL);
    expect("sched.foreign_thread", run_root(r, 1), "ok");
    expect("sched.foreign_thread.trace", trace_buf,
            "cb same_thread=1 thread empty=1 valid=0 same_thread=0");
    r->api->free(r);
}

/* a root's is_same_thread is right from the flow's first step on */
static void rs_first(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)bsi;
    (void)args;
    FutoInAsyncSteps* root = data;
    trace("first root_same=%d", root->api->is_same_thread(root));
}

static void test_root_same_thread(void)
{
    for (int i = 0; i < 20; ++i) {
        reset_trace();
        FutoInAsyncSteps* r = futoin_asyncsteps_new(rt);
        r->api->add(r, r, rs_first, NULL);
        run_root(r, 1);
        if (strcmp(trace_buf, "first root_same=1") != 0) {
            break;
        }
        r->api->free(r);
    }
    expect("root.is_same_thread.first_step", trace_buf, "first root_same=1");
}

/* ================================================ 3. rootId, newInstance */
enum
{
    RID_S1,
    RID_SUB,
    RID_S2,
    RID_B0,
    RID_B0_SUB,
    RID_B1,
    RID_B1_SUB,
    RID_S3,
    RID_OTHER,
    RID_N
};
static ptrdiff_t rids[RID_N];

static void rid_record(FutoInAsyncSteps* bsi, void* data)
{
    ptrdiff_t id = bsi->api->rootId(bsi);
    pthread_mutex_lock(&ev_mx);
    rids[(intptr_t)data] = id;
    pthread_mutex_unlock(&ev_mx);
}

static void rid_plain(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)args;
    rid_record(bsi, data);
}

static void rid_s1(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)args;
    rid_record(bsi, data);
    bsi->api->add(bsi, (void*)(intptr_t)RID_SUB, rid_plain, NULL);
}

static void rid_branch(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)args;
    rid_record(bsi, data);
    bsi->api->add(bsi, (void*)((intptr_t)data + 1), rid_plain, NULL);
}

static void rid_s2(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)args;
    rid_record(bsi, data);
    FutoInAsyncSteps* p = bsi->api->parallel(bsi, NULL, NULL);
    p->api->add(p, (void*)(intptr_t)RID_B0, rid_branch, NULL);
    p->api->add(p, (void*)(intptr_t)RID_B1, rid_branch, NULL);
}

/* newInstance from a step: the child runs on its own, after its parent's
 * flow has ended, until the main thread completes its waiting step */
static FutoInAsyncSteps* ni_child;
static FutoInAsyncSteps* ni_child_step;
static ptrdiff_t ni_child_rid, ni_parent_rid;
static int ni_waiting, ni_child_done;

static void ni_child_wait(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)data;
    (void)args;
    ni_child_rid = bsi->api->rootId(bsi);
    ni_child_step = bsi;
    bsi->api->waitExternal(bsi);
    bump(&ni_waiting);
}

static void ni_child_last(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)bsi;
    (void)data;
    trace("child got %d", args->arg0.type ? args->arg0.i32 : -1);
    bump(&ni_child_done);
}

static void ni_parent(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)data;
    (void)args;
    ni_parent_rid = bsi->api->rootId(bsi);
    FutoInAsyncSteps* c = bsi->api->newInstance(bsi);
    trace("parent new=%s", c ? "root" : "NULL");
    if (!c) {
        return;
    }
    ni_child = c;
    c->api->add(c, NULL, ni_child_wait, NULL);
    c->api->add(c, NULL, ni_child_last, NULL);
    c->api->execute(c, NULL, NULL);
}

static void ni_plain(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)bsi;
    (void)data;
    (void)args;
    trace("instance step");
}

static void test_root_id(void)
{
    FutoInAsyncSteps* r = futoin_asyncsteps_new(rt);
    r->api->add(r, (void*)(intptr_t)RID_S1, rid_s1, NULL);
    r->api->add(r, (void*)(intptr_t)RID_S2, rid_s2, NULL);
    r->api->add(r, (void*)(intptr_t)RID_S3, rid_plain, NULL);
    expect("root_id.flow", run_root(r, 1), "ok");
    r->api->free(r);
    FutoInAsyncSteps* r2 = futoin_asyncsteps_new(rt);
    r2->api->add(r2, (void*)(intptr_t)RID_OTHER, rid_plain, NULL);
    expect("root_id.other_flow", run_root(r2, 1), "ok");
    r2->api->free(r2);

    char buf[160];
    pthread_mutex_lock(&ev_mx);
    const ptrdiff_t* d = rids;
    snprintf(buf, sizeof(buf),
            "nonzero=%d flow_same=%d branches_own=%d branch_subs_same=%d "
            "other_differs=%d",
            d[RID_S1] != 0 && d[RID_B0] != 0 && d[RID_B1] != 0 && d[RID_OTHER] != 0,
            d[RID_SUB] == d[RID_S1] && d[RID_S2] == d[RID_S1] && d[RID_S3] == d[RID_S1],
            d[RID_B0] != d[RID_S1] && d[RID_B1] != d[RID_S1] && d[RID_B0] != d[RID_B1],
            d[RID_B0_SUB] == d[RID_B0] && d[RID_B1_SUB] == d[RID_B1],
            d[RID_OTHER] != d[RID_S1] && d[RID_OTHER] != d[RID_B0]
                    && d[RID_OTHER] != d[RID_B1]);
    pthread_mutex_unlock(&ev_mx);
    expect("root_id.values", buf,
            "nonzero=1 flow_same=1 branches_own=1 branch_subs_same=1 other_differs=1");

    /* newInstance from a step */
    reset_trace();
    r = futoin_asyncsteps_new(rt);
    r->api->add(r, NULL, ni_parent, NULL);
    expect("new_instance.step", run_root(r, 1), "ok");
    r->api->free(r); /* the child does not depend on its parent */
    int waiting = wait_count(&ni_waiting, 1);
    int done_early = count_of(&ni_child_done);
    FutoInArgs out = {0};
    out.arg0.type = &T_I32;
    out.arg0.i32 = 5;
    ni_child_step->api->success(ni_child_step, &out); /* from the main thread */
    int done = wait_count(&ni_child_done, 1);
    snprintf(buf, sizeof(buf), "waiting=%d done_early=%d done=%d rid_differs=%d",
            waiting, done_early, done, ni_child_rid != ni_parent_rid);
    expect("new_instance.independent", buf,
            "waiting=1 done_early=0 done=1 rid_differs=1");
    expect("new_instance.trace", trace_buf, "parent new=root child got 5");
    ni_child->api->free(ni_child);

    /* newInstance on a root, from the main thread */
    reset_trace();
    r = futoin_asyncsteps_new(rt);
    FutoInAsyncSteps* n = r->api->newInstance(r);
    r->api->free(r); /* the new root does not depend on this one */
    n->api->add(n, NULL, ni_plain, NULL);
    expect("new_instance.root", run_root(n, 1), "ok");
    expect("new_instance.root.trace", trace_buf, "instance step");
    n->api->free(n);
}

/* ================================================ 4. values */
static int s16_cleanups, s32_cleanups;
static void s16_cleanup(FutoInBinaryValue* v)
{
    (void)v;
    bump(&s16_cleanups);
}
static void s32_cleanup(FutoInBinaryValue* v)
{
    (void)v;
    bump(&s32_cleanups);
}
static const FutoInType T_S16 = {FTN_TYPE_STRING16, s16_cleanup};
static const FutoInType T_S32 = {FTN_TYPE_STRING32, s32_cleanup};

/* h, e-acute, U+1F600 (a surrogate pair), then "xyz" cut off by length 4 */
static const char16_t s16_len[] = u"h\u00e9\U0001F600xyz";
static const char16_t s16_nul[] = u"a\u00e9";
/* euro sign, U+1F600, "1", then "23" cut off by length 3 */
static const char32_t s32_len[] = U"\u20ac\U0001F6001" U"23";
static const char32_t s32_nul[] = U"z\u00e9";

static void set_s16(FutoInBinaryValue* v, const char16_t* s, uint32_t len)
{
    v->type = &T_S16;
    v->cstr16 = s;
    v->length = len;
}

static void set_s32(FutoInBinaryValue* v, const char32_t* s, uint32_t len)
{
    v->type = &T_S32;
    v->cstr32 = s;
    v->length = len;
}

/* "<flags>:<length>:<hex bytes>" of a string the runtime gave */
static void dump_str(char* out, size_t n, const FutoInBinaryValue* v)
{
    if (!v->type) {
        snprintf(out, n, "empty");
        return;
    }
    int k = snprintf(out, n, "%d:%u:", v->type->flags, v->length);
    for (uint32_t i = 0; i < v->length && (size_t)k + 3 < n; i++) {
        k += snprintf(out + k, n - k, "%02x", (unsigned char)v->cstr[i]);
    }
    if (v->cstr[v->length] != 0) {
        snprintf(out + k, n - k, "-NOT-NUL-TERMINATED");
    }
}

static void vs_make(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)data;
    (void)args;
    FutoInArgs out = {0};
    set_s16(&out.arg0, s16_len, 4);
    set_s16(&out.arg1, s16_nul, 0);
    set_s32(&out.arg2, s32_len, 3);
    set_s32(&out.arg3, s32_nul, 0);
    bsi->api->success(bsi, &out);
    /* copied: every cleanup has run, every slot is reset */
    trace("make cleanups=%d,%d reset=%d", count_of(&s16_cleanups),
            count_of(&s32_cleanups),
            !out.arg0.type && !out.arg1.type && !out.arg2.type && !out.arg3.type);
}

static void vs_show(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)bsi;
    (void)data;
    char a[4][80];
    for (int i = 0; i < 4; i++) {
        dump_str(a[i], sizeof(a[i]), &args->args[i]);
    }
    trace("got %s %s %s %s", a[0], a[1], a[2], a[3]);
}

static void test_strings(void)
{
    reset_trace();
    FutoInAsyncSteps* r = futoin_asyncsteps_new(rt);
    r->api->add(r, NULL, vs_make, NULL);
    r->api->add(r, NULL, vs_show, NULL);
    expect("values.strings", run_root(r, 1), "ok");
    expect("values.strings.trace", trace_buf,
            "make cleanups=2,2 reset=1 got "
            "2:7:68c3a9f09f9880 " /* h é U+1F600 */
            "2:3:61c3a9 " /* a é */
            "2:8:e282acf09f988031 " /* € U+1F600 1 */
            "2:3:7ac3a9"); /* z é */
    r->api->free(r);
}

/* arrays and custom objects: passed on untouched, cleaned up once */
typedef struct
{
    int32_t data[3]; /* first: the value's p points here */
    int cleanups;
    int wrong;
} Arr;
typedef struct
{
    int magic;
    int cleanups;
    int wrong;
} Obj;

static Arr arr_a = {{7, -8, 9}, 0, 0}, arr_b = {{1, 2, 3}, 0, 0};
static Obj obj_a = {0xA, 0, 0}, obj_b = {0xB, 0, 0}, obj_c = {0xC, 0, 0};

static void arr_cleanup(FutoInBinaryValue* v)
{
    Arr* a = (Arr*)(uintptr_t)v->p;
    pthread_mutex_lock(&ev_mx);
    if (v->length != 3) {
        a->wrong++;
    }
    a->cleanups++;
    pthread_cond_broadcast(&ev_cv);
    pthread_mutex_unlock(&ev_mx);
}

static void obj_cleanup(FutoInBinaryValue* v)
{
    Obj* o = v->custom_data;
    pthread_mutex_lock(&ev_mx);
    if (v->length != 5 || v->u64 != 0x5eed) {
        o->wrong++;
    }
    o->cleanups++;
    pthread_cond_broadcast(&ev_cv);
    pthread_mutex_unlock(&ev_mx);
}

static const FutoInType T_ARR = {FTN_TYPE_ARRAY | FTN_TYPE_INT32, arr_cleanup};
static const FutoInType T_OBJ = {FTN_TYPE_CUSTOM_OBJECT, obj_cleanup};

static void set_arr(FutoInBinaryValue* v, Arr* a)
{
    v->type = &T_ARR;
    v->p = a->data;
    v->length = 3;
}

static void set_obj(FutoInBinaryValue* v, Obj* o)
{
    v->type = &T_OBJ;
    v->u64 = 0x5eed;
    v->custom_data = o;
    v->length = 5;
}

/* "<a|o|->" per slot, 1 when unchanged: same type, pointer, length, data */
static void check_slots(char* out, const FutoInArgs* args)
{
    const void* want[4] = {&arr_a, &obj_a, &arr_b, &obj_b};
    for (int i = 0; i < 4; i++) {
        const FutoInBinaryValue* v = &args->args[i];
        int ok;
        if (i % 2 == 0) {
            const Arr* a = want[i];
            ok = v->type == &T_ARR && v->p == a->data && v->length == 3
                    && v->custom_data == NULL;
        } else {
            ok = v->type == &T_OBJ && v->custom_data == want[i] && v->length == 5
                    && v->u64 == 0x5eed;
        }
        out[i] = ok ? '1' : '0';
    }
    out[4] = 0;
}

static void counts4(char* out, size_t n)
{
    pthread_mutex_lock(&ev_mx);
    snprintf(out, n, "%d%d%d%d", arr_a.cleanups, obj_a.cleanups, arr_b.cleanups,
            obj_b.cleanups);
    pthread_mutex_unlock(&ev_mx);
}

static void vv_make(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)data;
    (void)args;
    FutoInArgs out = {0};
    set_arr(&out.arg0, &arr_a);
    set_obj(&out.arg1, &obj_a);
    set_arr(&out.arg2, &arr_b);
    set_obj(&out.arg3, &obj_b);
    bsi->api->success(bsi, &out);
    char c[8];
    counts4(c, sizeof(c));
    trace("make reset=%d cleanups=%s",
            !out.arg0.type && !out.arg1.type && !out.arg2.type && !out.arg3.type, c);
}

static void vv_forward(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)data;
    char s[8], c[8];
    check_slots(s, args);
    bsi->api->success(bsi, (FutoInArgs*)args); /* forwards all four */
    counts4(c, sizeof(c));
    trace("forward same=%s cleanups=%s", s, c);
}

static void vv_take(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)data;
    char s[8], c1[8], c2[8];
    check_slots(s, args);
    FutoInArgs* a = (FutoInArgs*)args;
    /* move out obj_a and arr_b, clean them up here; leave the others */
    FutoInBinaryValue o = a->arg1, b = a->arg2;
    a->arg1.type = NULL;
    a->arg2.type = NULL;
    counts4(c1, sizeof(c1));
    futoin_reset_binval(&o);
    futoin_reset_binval(&b);
    counts4(c2, sizeof(c2));
    trace("take same=%s cleanups=%s then=%s", s, c1, c2);
    bsi->api->success(bsi, NULL);
}

static void vv_after(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)bsi;
    (void)data;
    char c[8];
    counts4(c, sizeof(c));
    trace("after empty=%d%d%d%d cleanups=%s", !args->arg0.type, !args->arg1.type,
            !args->arg2.type, !args->arg3.type, c);
}

/* a value the flow ends with: cleaned up once, when the flow ends */
static void vv_result(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)data;
    (void)args;
    FutoInArgs out = {0};
    set_obj(&out.arg0, &obj_c);
    bsi->api->success(bsi, &out);
    signal_done("ok");
}

static void test_passthrough(void)
{
    reset_trace();
    FutoInAsyncSteps* r = futoin_asyncsteps_new(rt);
    r->api->add(r, NULL, vv_make, NULL);
    r->api->add(r, NULL, vv_forward, NULL);
    r->api->add(r, NULL, vv_take, NULL);
    r->api->add(r, NULL, vv_after, NULL);
    expect("values.passthrough", run_root(r, 1), "ok");
    expect("values.passthrough.trace", trace_buf,
            "make reset=1 cleanups=0000 forward same=1111 cleanups=0000 "
            "take same=1111 cleanups=0000 then=0110 "
            "after empty=1111 cleanups=1111");
    r->api->free(r);

    /* the last step's values: no step takes them */
    r = futoin_asyncsteps_new(rt);
    r->api->add(r, NULL, vv_result, NULL);
    expect("values.flow_result", run_root(r, 0), "ok");
    wait_count(&obj_c.cleanups, 1);
    r->api->free(r);
    char buf[64];
    pthread_mutex_lock(&ev_mx);
    snprintf(buf, sizeof(buf), "cleanups=%d wrong=%d", obj_c.cleanups, obj_c.wrong);
    pthread_mutex_unlock(&ev_mx);
    expect("values.flow_result.cleanup", buf, "cleanups=1 wrong=0");
}

/* ================================================ 5. sync objects */
static FutoInSync* sy_obj;

static void sy_leave(void* data)
{
    FutoInAsyncSteps* bsi = data;
    trace("m");
    bsi->api->success(bsi, NULL);
}

static void sy_section(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)args;
    trace("in%d", (int)(intptr_t)data);
    /* stays inside until the next loop pass */
    bsi->api->waitExternal(bsi);
    bsi->api->sched_immediate(bsi, bsi, sy_leave);
}

static void sy_branch(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)args;
    bsi->api->addSync(bsi, sy_obj, data, sy_section, NULL);
}

static void sy_rejected(FutoInAsyncSteps* bsi, void* data, const char* code)
{
    const char* info = bsi->api->stateVariable(bsi, NULL, "error_info", NULL, NULL);
    trace("rej%d %s (%s)", (int)(intptr_t)data, code, str_or_null(info));
    bsi->api->success(bsi, NULL);
}

/* n branches of one step: every branch tries to enter in the same loop
 * pass, before any timer of the sync object can fire */
static void sy_start(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)args;
    int n = (int)(intptr_t)data;
    FutoInAsyncSteps* p = bsi->api->parallel(bsi, NULL, NULL);
    for (int i = 0; i < n; i++) {
        p->api->add(p, (void*)(intptr_t)i, sy_branch, sy_rejected);
    }
}

static void sync_case(const char* name, FutoInSync* obj, int branches, const char* want)
{
    char n2[64];
    sy_obj = obj;
    reset_trace();
    FutoInAsyncSteps* r = futoin_asyncsteps_new(rt);
    r->api->add(r, (void*)(intptr_t)branches, sy_start, NULL);
    expect(name, run_root(r, 1), "ok");
    snprintf(n2, sizeof(n2), "%s.trace", name);
    expect(n2, trace_buf, want);
    r->api->free(r);
    futoin_sync_free(obj);
}

static void test_sync(void)
{
    /* 2 per 10 ms period, 5 flows: 2, 2, then 1. A period's entries are
     * let in together; the "m" each one schedules runs before the next
     * period's timer can let anyone in. */
    sync_case("sync.throttle", futoin_throttle_new(2, 10, UINT32_MAX), 5,
            "in0 in1 m m in2 in3 m m in4 m");
    sync_case("sync.throttle.queue", futoin_throttle_new(1, 10, 0), 2,
            "in0 rej1 DefenseRejected (Throttle: the queue is full) m");
    sync_case("sync.limiter", futoin_limiter_new(1, 0, 10, 10, 0), 2,
            "in0 rej1 DefenseRejected (Mutex: the queue is full) m");
    sync_case("sync.limiter.no_rate", futoin_limiter_new(1, 0, 0, 0, 0), 2,
            "in0 rej1 DefenseRejected (Mutex: the queue is full) m");
    sync_case("sync.mutex.queue", futoin_mutex_new(1, 1), 3,
            "in0 rej2 DefenseRejected (Mutex: the queue is full) m in1 m");
}

/* ================================================ 6, 7. cancel from a thread */
static int cx_started, cx_cancels, cx_unhandled, cx_ended, cx_never_ran;
static FutoInAsyncSteps* cx_step;

static void* cx_alloc(void* data)
{
    return data;
}

static void cx_end(void* data, void* value)
{
    (void)value;
    bump(data);
}

static void cx_cancel_cb(FutoInAsyncSteps* bsi, void* data)
{
    (void)data;
    trace("cancel valid=%d", bsi->api->isValid(bsi));
    bump(&cx_cancels);
}

static void cx_unhandled_cb(FutoInAsyncSteps* bsi, void* data, const char* code)
{
    (void)bsi;
    (void)data;
    trace("unhandled %s", code);
    bump(&cx_unhandled);
}

static void cx_wait(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)data;
    (void)args;
    /* its cleanup tells when the flow has ended */
    bsi->api->stateVariable(bsi, &cx_ended, "end", cx_alloc, cx_end);
    cx_step = bsi;
    bsi->api->setCancel(bsi, NULL, cx_cancel_cb);
    trace("waiting");
    bump(&cx_started);
}

static void cx_next(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)bsi;
    (void)data;
    (void)args;
    trace("NEXT-RAN");
    bump(&cx_never_ran);
}

static void* cx_cancel_thread(void* p)
{
    FutoInAsyncSteps* r = p;
    r->api->cancel(r);
    return NULL;
}

static void* cx_free_thread(void* p)
{
    FutoInAsyncSteps* r = p;
    r->api->free(r);
    return NULL;
}

static Obj obj_late = {0xD, 0, 0};
static int late_valid = -1;
static void* cx_late_thread(void* p)
{
    FutoInAsyncSteps* bsi = p;
    late_valid = bsi->api->isValid(bsi);
    FutoInArgs out = {0};
    set_obj(&out.arg0, &obj_late);
    bsi->api->success(bsi, &out);
    bsi->api->handle_error(bsi, "Late", "after the end");
    bsi->api->success(bsi, NULL);
    return NULL;
}

static FutoInAsyncSteps* cx_start(void)
{
    int started = count_of(&cx_started);
    FutoInAsyncSteps* r = futoin_asyncsteps_new(rt);
    r->api->add(r, NULL, cx_wait, NULL);
    r->api->add(r, NULL, cx_next, NULL);
    r->api->execute(r, NULL, cx_unhandled_cb);
    wait_count(&cx_started, started + 1);
    return r;
}

static void cx_counts(char* buf, size_t n)
{
    pthread_mutex_lock(&ev_mx);
    snprintf(buf, n, "cancels=%d unhandled=%d ended=%d next=%d", cx_cancels,
            cx_unhandled, cx_ended, cx_never_ran);
    pthread_mutex_unlock(&ev_mx);
}

static void test_cancel_thread(void)
{
    char buf[160];
    reset_trace();
    FutoInAsyncSteps* r = cx_start();
    int root_same = r->api->is_same_thread(r);
    int step_same = cx_step->api->is_same_thread(cx_step);
    int step_valid = cx_step->api->isValid(cx_step);
    pthread_t t;
    pthread_create(&t, NULL, cx_cancel_thread, r);
    pthread_join(t, NULL);
    wait_count(&cx_ended, 1);
    snprintf(buf, sizeof(buf), "root_same_thread=%d step_same_thread=%d valid=%d",
            root_same, step_same, step_valid);
    expect("cancel.thread.before", buf, "root_same_thread=0 step_same_thread=0 valid=1");
    cx_counts(buf, sizeof(buf));
    expect("cancel.thread", buf, "cancels=1 unhandled=0 ended=1 next=0");
    expect("cancel.thread.trace", trace_buf, "waiting cancel valid=1");

    /* 7: completing the cancelled step from a thread: a no-op */
    pthread_create(&t, NULL, cx_late_thread, cx_step);
    pthread_join(t, NULL);
    pthread_mutex_lock(&ev_mx);
    snprintf(buf, sizeof(buf), "valid=%d value_cleanups=%d wrong=%d", late_valid,
            obj_late.cleanups, obj_late.wrong);
    pthread_mutex_unlock(&ev_mx);
    expect("cancel.late_success", buf, "valid=0 value_cleanups=1 wrong=0");
    r->api->cancel(r); /* already ended: a no-op */
    r->api->free(r);
    cx_counts(buf, sizeof(buf));
    expect("cancel.late_success.counts", buf, "cancels=1 unhandled=0 ended=1 next=0");
    expect("cancel.late_success.trace", trace_buf, "waiting cancel valid=1");

    /* free() of a running root from a thread cancels it the same way */
    reset_trace();
    r = cx_start();
    pthread_create(&t, NULL, cx_free_thread, r);
    pthread_join(t, NULL);
    wait_count(&cx_ended, 2);
    cx_counts(buf, sizeof(buf));
    expect("cancel.free_thread", buf, "cancels=2 unhandled=0 ended=2 next=0");
    expect("cancel.free_thread.trace", trace_buf, "waiting cancel valid=1");
}

/* ================================================ after the runtime */
static void test_after_runtime_free(void)
{
    char buf[256];
    int k = 0;
    pthread_mutex_lock(&ev_mx);
    SvTag* tags[] = {&sv_flows[0].x, &sv_flows[0].y, &sv_flows[0].z, &sv_flows[1].x,
            &sv_flows[1].y, &sv_flows[1].z, &sv_unexecuted};
    int sv_ok = 1;
    for (size_t i = 0; i < sizeof(tags) / sizeof(tags[0]); i++) {
        sv_ok &= tags[i]->allocs == 1 && tags[i]->cleanups == 1 && tags[i]->wrong == 0;
    }
    k += snprintf(buf + k, sizeof(buf) - k, "state=%d/%d ", sv_ok, sv_cleanups);
    k += snprintf(buf + k, sizeof(buf) - k, "strings=%d,%d ", s16_cleanups, s32_cleanups);
    k += snprintf(buf + k, sizeof(buf) - k, "values=%d%d%d%d%d%d wrong=%d ",
            arr_a.cleanups, obj_a.cleanups, arr_b.cleanups, obj_b.cleanups,
            obj_c.cleanups, obj_late.cleanups,
            arr_a.wrong + obj_a.wrong + arr_b.wrong + obj_b.wrong + obj_c.wrong
                    + obj_late.wrong);
    snprintf(buf + k, sizeof(buf) - k, "cancels=%d unhandled=%d ended=%d next=%d",
            cx_cancels, cx_unhandled, cx_ended, cx_never_ran);
    pthread_mutex_unlock(&ev_mx);
    expect("after_runtime_free", buf,
            "state=1/7 strings=2,2 values=111111 wrong=0 "
            "cancels=2 unhandled=0 ended=2 next=0");
}

int main(void)
{
    rt = futoin_runtime_new(2);
    if (!rt) {
        fprintf(stderr, "no runtime\n");
        return 2;
    }
    test_state();
    test_error_info();
    test_sched();
    test_root_same_thread();
    test_root_id();
    test_strings();
    test_passthrough();
    test_sync();
    test_cancel_thread();
    futoin_runtime_free(rt);
    test_after_runtime_free();
    printf("%d failures\n", failures);
    return failures ? 1 : 0;
}
