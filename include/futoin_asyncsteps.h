/*
 * futoin_asyncsteps.h - the FutoIn AsyncSteps universal binary interface
 * (FTN12 section 2.7) of the futoin-asyncsteps runtime, as a C ABI.
 *
 * Link with the crate's static library (libfutoin_asyncsteps.a, plus
 * -lpthread -ldl -lm) or its shared library (libfutoin_asyncsteps.so).
 * See docs/c-interface.md for a complete program and the ownership rules.
 *
 * The types below are the specification's, unchanged; only the body of
 * futoin_reset_binval is written in plain C11. After them come this
 * runtime's entry points and the notes on what each bad input gets.
 *
 * Threads. Step callbacks run on the loop thread that owns the flow.
 * success() and handle_error() on a waiting step, and cancel() and free()
 * on a root, may be called from any thread: they are marshalled to the
 * flow's loop and never block. isValid(), rootId(), is_same_thread(),
 * sched_is_valid() (0 there) and sched_cancel() (a no-op there) may be
 * called from any thread too, and so may the scheduling calls on a waiting
 * step (index 20..23). Every other
 * call is for the flow's loop thread, inside a callback that received the
 * handle: made on a step's handle from another thread while the step
 * lives, it fails the step with "InternalError" (error_info names the
 * call), a waiting step at once, any other step when its callback returns
 * (a call racing with the end of the step is a no-op, as on a stale one).
 *
 * Handles. The FutoInAsyncSteps* given to a callback stands for that step
 * (or, in an error handler, for the failed step) and stays valid while the
 * step lives: a step that called waitExternal(), setTimeout() or
 * setCancel() lives until it completes, any other step until its callback
 * returns. Using a handle after its step ended is detected: isValid() gives
 * 0 and every other call is a no-op (the memory behind a step handle is
 * never given back to the system, so such a call is never a crash; the
 * detection is exact for at least the next 256 steps run on that loop).
 *
 * Bad input. A NULL bsi, a NULL callback where one is required, a NULL
 * code or name, an unknown type flag, a misused call (success() twice,
 * success() after add(), a loop call outside a step, execute() on a step)
 * never crashes: inside a step's callback the step fails with
 * "InternalError" and error_info says what was wrong. On a root, the calls
 * meant for a step's callback (success(), handle_error(), setTimeout(),
 * setCancel(), waitExternal(), stack(), the loop calls) and a NULL execute
 * callback given to add() put a step in the root that fails its next run
 * with "InternalError" (info: "<call> on a root: it is for a step's
 * callback", or "add(): the execute callback is NULL"). Elsewhere the call
 * is a no-op (functions returning a pointer return NULL). NULL args to
 * success() means no result values; a NULL error handler passes errors up;
 * a NULL cleanup is never called. A handle that is not one of the table's
 * own kind (another implementation's, or a root given to a step's table)
 * is treated as a stale one: isValid() gives 0 and every other call is a
 * no-op; only its api field is read.
 */

#ifndef FUTOIN_ASYNCSTEPS_H
#define FUTOIN_ASYNCSTEPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#else
#include <uchar.h>
#endif

/* ---- 2.7.1 Binary data ------------------------------------------------ */

typedef struct FutoInBinaryValue_ FutoInBinaryValue;
typedef struct FutoInType_ FutoInType;
typedef uint8_t FutoInTypeFlags;

enum
{
    FTN_TYPE_CUSTOM_OBJECT = 0x01,
    FTN_TYPE_STRING = 0x02,
    FTN_TYPE_STRING16 = 0x03,
    FTN_TYPE_STRING32 = 0x04,
    FTN_TYPE_BOOL = 0x05,
    FTN_TYPE_INT8 = 0x06,
    FTN_TYPE_INT16 = 0x07,
    FTN_TYPE_INT32 = 0x08,
    FTN_TYPE_INT64 = 0x09,
    FTN_TYPE_UINT8 = 0x0A,
    FTN_TYPE_UINT16 = 0x0B,
    FTN_TYPE_UINT32 = 0x0C,
    FTN_TYPE_UINT64 = 0x0D,
    FTN_TYPE_FLOAT = 0x0E,
    FTN_TYPE_DOUBLE = 0x0F,
    FTN_BASE_TYPE_MASK = 0x0F,
    /* -- */
    FTN_TYPE_ARRAY = 0x10,
    FTN_COMPLEX_TYPE_MASK = 0xF0
};

struct FutoInType_
{
    const FutoInTypeFlags flags;
    void (*const cleanup)(FutoInBinaryValue* v);
    /* NOTE: extendable by implementation */
};

/*
 * Values given to this runtime: strings (STRING, STRING16, STRING32) are
 * `length` code units long, or NUL-terminated when `length` is 0; they are
 * copied and their cleanup runs at once. Arrays (`FTN_TYPE_ARRAY | base`,
 * `p` the first element, `length` elements) and custom objects are passed
 * on as they are, and their cleanup runs exactly once, when the last step
 * that could take them is done with them. An empty slot has type == NULL;
 * values end at the first empty slot.
 *
 * Values given by this runtime to an execute callback: strings are UTF-8
 * and NUL-terminated (`length` bytes without the NUL). The callback may
 * move a value out of its args (copy the FutoInBinaryValue, then set the
 * slot's type to NULL) or forward all of them with success(); whatever is
 * left is reset when the callback returns.
 */
struct FutoInBinaryValue_
{
    const FutoInType* type;
    union
    {
        const void* p;
        const char* cstr;
        const char16_t* cstr16;
        const char32_t* cstr32;
        bool b;
        int8_t i8;
        int16_t i16;
        int32_t i32;
        int64_t i64;
        uint8_t u8;
        uint16_t u16;
        uint32_t u32;
        uint64_t u64;
        float f;
        double d;
    };
    void* custom_data;
    uint32_t length;
};

static inline void futoin_reset_binval(FutoInBinaryValue* v)
{
    const FutoInType* tp = v->type;
    if (tp) {
        void (*f)(FutoInBinaryValue*) = tp->cleanup;
        if (f) {
            f(v);
        }
    }

    v->type = 0;
    v->u64 = 0;
    v->custom_data = 0;
    v->length = 0;
}

/* ---- 2.7.2 Binary AsyncSteps interface -------------------------------- */

typedef struct FutoInAsyncStepsAPI_ FutoInAsyncStepsAPI;
typedef struct FutoInAsyncSteps_ FutoInAsyncSteps;
typedef struct FutoInSyncAPI_ FutoInSyncAPI;
typedef struct FutoInSync_ FutoInSync;
typedef struct FutoInArgs_ FutoInArgs;
typedef struct FutoInHandle_ FutoInHandle;

struct FutoInArgs_
{
    union
    {
        struct
        {
            FutoInBinaryValue arg0;
            FutoInBinaryValue arg1;
            FutoInBinaryValue arg2;
            FutoInBinaryValue arg3;
        };
        FutoInBinaryValue args[4];
    };
};

struct FutoInHandle_
{
    void* data1;
    void* data2;
    ptrdiff_t data3;
};

typedef void (*FutoInAsyncSteps_execute_callback)(
        FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args);
typedef void (*FutoInAsyncSteps_error_callback)(
        FutoInAsyncSteps* bsi, void* data, const char* code);
typedef void (*FutoInAsyncSteps_cancel_callback)(
        FutoInAsyncSteps* bsi, void* data);

struct FutoInAsyncStepsAPI_
{
    union
    {
        struct
        {
            /* Index 0 */
            void (*add)(
                    FutoInAsyncSteps* bsi,
                    void* data,
                    FutoInAsyncSteps_execute_callback f,
                    FutoInAsyncSteps_error_callback eh);
            /* Index 1: returns the parallel's own handle; add its branches
             * with its add(), before the calling callback returns. On a
             * root, before execute() takes the model: after that (while
             * the flow runs, or later) its add() adds nothing and the
             * root's next run fails with "InternalError" (detected for at
             * least the next 256 parallels made on that root; the handle
             * is freed with the root). */
            FutoInAsyncSteps* (*parallel)(
                    FutoInAsyncSteps* bsi,
                    void* data,
                    FutoInAsyncSteps_error_callback eh);
            /* Index 2: allocate(data) runs once per name and flow; the same
             * pointer is returned after; cleanup(data, value) runs when the
             * flow ends. allocate may call the handle; if that makes the
             * same variable, that value is the one returned and kept, and
             * the value allocate returns is cleaned up at once. The names "error_info" and "last_exception" are
             * predefined: they return a NUL-terminated const char* (or
             * NULL), valid until the next step runs. */
            void* (*stateVariable)(
                    FutoInAsyncSteps* bsi,
                    void* data,
                    const char* name,
                    void* (*allocate)(void* data),
                    void (*cleanup)(void* data, void* value));
            /* Index 3: zeroed memory (16-byte aligned) freed when the step
             * ends, after cleanup(value). */
            void* (*stack)(
                    FutoInAsyncSteps* bsi,
                    size_t data_size,
                    void (*cleanup)(void* value));
            /* Index 4: the values are moved: args is reset on return. */
            void (*success)(FutoInAsyncSteps* bsi, FutoInArgs* args);
            /* Index 5: inside a callback, return right after it; error_info
             * is set at once. */
            void (*handle_error)(
                    FutoInAsyncSteps* bsi, const char* code, const char* info);
            /* Index 6 */
            void (*setTimeout)(FutoInAsyncSteps* bsi, uint32_t timeout_ms);
            /* Index 7 */
            void (*setCancel)(
                    FutoInAsyncSteps* bsi,
                    void* data,
                    FutoInAsyncSteps_cancel_callback ch);
            /* Index 8 */
            void (*waitExternal)(FutoInAsyncSteps* bsi);
            /* Index 9: label may be NULL; it is copied. */
            void (*loop)(
                    FutoInAsyncSteps* bsi,
                    void* data,
                    void (*f)(FutoInAsyncSteps* bsi, void* data),
                    const char* label);
            /* Index 10 */
            void (*repeat)(
                    FutoInAsyncSteps* bsi,
                    void* data,
                    size_t count,
                    void (*f)(FutoInAsyncSteps* bsi, void* data, size_t i),
                    const char* label);
            /* Index 11: NULL label = the innermost loop; return right after. */
            void (*breakLoop)(FutoInAsyncSteps* bsi, const char* label);
            /* Index 12 */
            void (*continueLoop)(FutoInAsyncSteps* bsi, const char* label);
            /* Index 13: roots only; unhandled_error (may be NULL) gets the
             * root's handle and the code of an error no handler took. */
            void (*execute)(
                    FutoInAsyncSteps* bsi,
                    void* data,
                    FutoInAsyncSteps_error_callback unhandled_error);
            /* Index 14: roots only, any thread. */
            void (*cancel)(FutoInAsyncSteps* bsi);
            /* Index 15: sync is a FutoInSync of this runtime or of any
             * other implementation (its lock/unlock are called). One of
             * this runtime's objects is held from this call on (it may be
             * freed right after); another implementation's object must
             * stay alive until the flows that added a step with it are
             * done with that step. */
            void (*addSync)(
                    FutoInAsyncSteps* bsi,
                    FutoInSync* sync,
                    void* data,
                    FutoInAsyncSteps_execute_callback f,
                    FutoInAsyncSteps_error_callback eh);
            /* Index 16: the same for every step of one flow; parallel
             * branches get ids of their own. */
            ptrdiff_t (*rootId)(FutoInAsyncSteps* bsi);
            /* Index 17 */
            int (*isValid)(FutoInAsyncSteps* bsi);
            /* Index 18: a new root on the same runtime; release it with
             * its api->free. */
            FutoInAsyncSteps* (*newInstance)(FutoInAsyncSteps* bsi);
            /* Index 19: roots only (a no-op on a step), any thread;
             * cancels a flow that still runs. */
            void (*free)(FutoInAsyncSteps* bsi);
            /* Index 20..23: the AsyncTool of the flow's loop. In the
             * step's callback and in its cancel callback they act at once
             * (a cancel callback can cancel the step's timer). Called off
             * that loop's thread on a waiting step (or on a root that is
             * not running), the callback is still scheduled, but the
             * returned handle is empty: sched_is_valid() gives 0 and
             * sched_cancel() does nothing for it. */
            FutoInHandle (*sched_immediate)(
                    FutoInAsyncSteps* bsi, void* data, void (*cb)(void* data));
            /* Index 21 */
            FutoInHandle (*sched_deferred)(
                    FutoInAsyncSteps* bsi,
                    uint32_t delay_ms,
                    void* data,
                    void (*cb)(void* data));
            /* Index 22 */
            void (*sched_cancel)(FutoInAsyncSteps* bsi, FutoInHandle* handle);
            /* Index 23 */
            int (*sched_is_valid)(FutoInAsyncSteps* bsi, FutoInHandle* handle);
            /* Index 24: 1 on the thread of the loop that runs the flow
             * (for a root: from its first step until it ends), else 0. */
            int (*is_same_thread)(FutoInAsyncSteps* bsi);
        };
        void* funcs[25];
    };
    /* NOTE: extendable by implementation */
};
struct FutoInAsyncSteps_
{
#ifdef __cplusplus
    FutoInAsyncSteps_(const FutoInAsyncStepsAPI* api) noexcept : api(api) {}
#endif
    const FutoInAsyncStepsAPI* const api;
    /* NOTE: extendable by implementation */
};

/* ---- 2.7.3 Binary synchronization primitive's interface --------------- */

struct FutoInSyncAPI_
{
    union
    {
        struct
        {
            /* Index 0 */
            void (*lock)(FutoInAsyncSteps* bsi, FutoInSync* sync);
            /* Index 1 */
            void (*unlock)(FutoInAsyncSteps* bsi, FutoInSync* sync);
        };
        void* funcs[2];
    };
    /* NOTE: extendable by implementation */
};
struct FutoInSync_
{
#ifdef __cplusplus
    FutoInSync_() noexcept : api(nullptr) {}
#endif
    const FutoInSyncAPI* const api;
    /* NOTE: extendable by implementation */
};

/* ---- This runtime's entry points -------------------------------------- */

/* An opaque runtime: its loops and their threads. */
typedef struct FutoInRuntime_ FutoInRuntime;

/* A runtime of `threads` loops (0 = one per available core), each on its
 * own thread. NULL if the threads or the event loops cannot be created. */
FutoInRuntime* futoin_runtime_new(uint32_t threads);

/* Cancels every flow that still runs, joins the loop threads and frees the
 * runtime. Roots made on it stay valid until freed, but can no longer run
 * (execute() reports "InternalError" to their unhandled_error). NULL is a
 * no-op. Called on one of the runtime's own loop threads, it returns at
 * once and the shutdown completes on another thread. */
void futoin_runtime_free(FutoInRuntime* rt);

/* A new root on `rt`; release it with bsi->api->free(bsi) (any thread; a
 * flow that still runs is cancelled, and the memory goes once it ended).
 * NULL if rt is NULL. */
FutoInAsyncSteps* futoin_asyncsteps_new(FutoInRuntime* rt);

/* Sync objects (spec 2.3-2.5), usable with addSync() on any flow of any
 * runtime. max_queue == UINT32_MAX: no queue limit. A Limiter's rate,
 * period_ms and burst limit admissions per period (rate 0: no rate limit).
 * Free them with futoin_sync_free once no more addSync() calls use them. */
FutoInSync* futoin_mutex_new(uint32_t max, uint32_t max_queue);
FutoInSync* futoin_throttle_new(
        uint32_t max, uint32_t period_ms, uint32_t max_queue);
FutoInSync* futoin_limiter_new(
        uint32_t concurrent,
        uint32_t max_queue,
        uint32_t rate,
        uint32_t period_ms,
        uint32_t burst);

/* Frees a sync object made by this runtime; NULL and foreign objects are a
 * no-op. A flow that added a step with it (queued, waiting or holding it)
 * keeps it alive until that step is done. */
void futoin_sync_free(FutoInSync* sync);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FUTOIN_ASYNCSTEPS_H */
