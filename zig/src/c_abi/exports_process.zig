//! The C calls that act on the whole library rather than on one handle: the page-cache advice
//! of the chunk pool, the stores policy of raw copies, and the reset of a forked child.
const std = @import("std");
const status = @import("../base/status.zig");
const answer = @import("exports_status.zig");
const Status = status.Status;
const store_pool = @import("../os/pool.zig");
const pool_advice = @import("../os/pool_advice.zig");
const raw_copy = @import("../store/raw_copy.zig");
const registry = @import("../store/registry.zig");
const store_mod = @import("../store/store.zig");
const view_mod = @import("../view/view.zig");

export fn lx_pool_set_policy(policy: u32) callconv(.c) Status {
    const chosen = std.enums.fromInt(pool_advice.Policy, policy) orelse
        return answer.invalid("pool policy {d} is not one of LX_POOL_AUTO (0), LX_POOL_ALWAYS (1) and LX_POOL_NEVER (2)", .{policy});
    store_pool.policy.store(chosen, .monotonic);
    status.clearMessage();
    return .ok;
}

export fn lx_pool_policy() callconv(.c) u32 {
    return @backingInt(store_pool.policy.load(.monotonic));
}

export fn lx_stores_set_policy(policy: u32) callconv(.c) Status {
    const chosen = std.enums.fromInt(raw_copy.StoresPolicy, policy) orelse
        return answer.invalid("stores policy {d} is not one of LX_STORES_AUTO (0), LX_STORES_STREAMING (1) and LX_STORES_CACHED (2)", .{policy});
    raw_copy.stores_policy.store(chosen, .monotonic);
    status.clearMessage();
    return .ok;
}

export fn lx_stores_policy() callconv(.c) u32 {
    return @backingInt(raw_copy.stores_policy.load(.monotonic));
}

export fn lx_after_fork_child() callconv(.c) void {
    store_pool.afterForkChild();
    registry.afterForkChild();
    store_mod.afterForkChild();
    view_mod.afterForkChild();
}
