//! How the C boundary answers: the status and message of every refusal and core error, the
//! checks of handles that write them, and lx_status_name and lx_last_error that read them back.
//! The export files alone write the message a C caller reads; the core only notes why
//! (diagnostic.zig) and returns an error.
const std = @import("std");
const status = @import("../base/status.zig");
const diagnostic = @import("../base/diagnostic.zig");
const store_errors = @import("../base/errors.zig");
const c_handles = @import("handles.zig");
const Status = status.Status;
const Store = @import("../store/store.zig").Store;
const LxStore = c_handles.LxStore;
const CHandle = c_handles.CHandle;

export fn lx_status_name(code: c_int) callconv(.c) [*:0]const u8 {
    if (code < 0 or code >= status.status_count) return "unknown";
    const s: Status = @fromBackingInt(@intCast(code));
    return s.name().ptr;
}

export fn lx_last_error() callconv(.c) [*:0]const u8 {
    return status.message();
}

/// LX_INVALID_ARGUMENT, after setting its message.
pub fn invalid(comptime fmt: []const u8, args: anytype) Status {
    status.setMessage(fmt, args);
    return .invalid_argument;
}

/// Turns a store result into a status (the message was set where the failure happened).
pub fn storeStatus(result: store_errors.Error!void) Status {
    result catch |err| return coreStatus(err);
    status.clearMessage();
    return .ok;
}

/// The C answer to an error of the core: its status, and its diagnostic as the message
/// lx_last_error() returns.
pub fn coreStatus(err: store_errors.Error) Status {
    status.setMessage("{s}", .{diagnostic.text()});
    return store_errors.toStatus(err);
}

pub fn outOfMemoryStatus(comptime function: []const u8) Status {
    status.setMessage(function ++ ": out of memory", .{});
    return .out_of_memory;
}

/// The object when the handle is open, or null after setting the message of
/// LX_INVALID_ARGUMENT.
pub fn openHandle(comptime T: type, handle: ?*const CHandle(T), comptime function: []const u8) ?*T {
    const noun = comptime c_handles.nounOf(T);
    if (handle == null) {
        _ = invalid(function ++ ": " ++ noun ++ " is NULL", .{});
        return null;
    }
    return c_handles.resolve(T, handle) orelse {
        _ = invalid(function ++ ": " ++ noun ++ " is not an open lx_" ++ noun ++ " (closed already, or another kind of pointer)", .{});
        return null;
    };
}

/// The stores of a list of handles (lx_view_open, lx_stores_delete), which the caller frees
/// with c_allocator; or null after setting the message of the status put in `refusal`.
pub fn resolveStores(comptime function: []const u8, handles: []const ?*LxStore, refusal: *Status) ?[]*Store {
    const stores = std.heap.c_allocator.alloc(*Store, handles.len) catch {
        refusal.* = outOfMemoryStatus(function);
        return null;
    };
    for (handles, stores, 0..) |handle, *store, i| {
        store.* = c_handles.resolve(Store, handle) orelse {
            std.heap.c_allocator.free(stores);
            refusal.* = if (handle == null)
                invalid(function ++ ": store {d} is NULL", .{i})
            else
                invalid(function ++ ": store {d} is not an open lx_store (closed already, or another kind of pointer)", .{i});
            return null;
        };
    }
    return stores;
}
