//! lx_view_open: several open stores read as one index space. Every other call of a view is
//! one a store shares (exports_reads.zig, exports_arrays.zig).
const std = @import("std");
const status = @import("../base/status.zig");
const Status = status.Status;
const c_handles = @import("handles.zig");
const LxStore = c_handles.LxStore;
const LxView = c_handles.LxView;
const handleOf = c_handles.handleOf;
const answer = @import("exports_status.zig");
const invalid = answer.invalid;
const coreStatus = answer.coreStatus;
const resolveStores = answer.resolveStores;
const store_limits = @import("../base/limits.zig");
const View = @import("../view/view.zig").View;

export fn lx_view_open(stores: ?[*]const ?*LxStore, count: u64, out: ?*?*LxView) callconv(.c) Status {
    const out_ptr = out orelse return invalid("lx_view_open: out is NULL", .{});
    out_ptr.* = null;
    if (count == 0 or count > store_limits.view_store_count_max)
        return invalid("lx_view_open: count is {d}; a view holds 1 to {d} stores", .{ count, store_limits.view_store_count_max });
    const stores_ptr = stores orelse return invalid("lx_view_open: stores is NULL", .{});
    const handles = stores_ptr[0..@intCast(count)];
    var refusal: Status = .ok;
    const plain = resolveStores("lx_view_open", handles, &refusal) orelse return refusal;
    defer std.heap.c_allocator.free(plain);
    const view = View.open(std.heap.c_allocator, plain) catch |err| return coreStatus(err);
    out_ptr.* = handleOf(View, view);
    status.clearMessage();
    return .ok;
}
