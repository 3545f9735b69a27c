//! The C handles of stores and views, and the checks of the C ABI that write no message:
//! turning an opaque lx_store or lx_view into its object and back, closing and measuring one,
//! and the pure tests of a caller's counts and store lists. The export files (exports.zig)
//! write every message.
const std = @import("std");
const assert = std.debug.assert;
const registry = @import("../store/registry.zig");
const numpy_array = @import("../batch/numpy_array.zig");
const Store = @import("../store/store.zig").Store;
const View = @import("../view/view.zig").View;

/// What a C caller holds for a Store or a View: an opaque pointer that is really a registry
/// token (registry.zig), never dereferenced. A handle closed already, a handle of the other
/// kind, or any other pointer is refused by the registry without reading memory through it.
pub const LxStore = opaque {};
pub const LxView = opaque {};

pub fn CHandle(comptime T: type) type {
    return switch (T) {
        Store => LxStore,
        View => LxView,
        else => @compileError("no C handle for " ++ @typeName(T)),
    };
}

/// "store" or "view": the noun of T's C functions (lx_store_*, lx_view_*) and messages.
pub fn nounOf(comptime T: type) []const u8 {
    return switch (T) {
        Store => "store",
        View => "view",
        else => @compileError("no C name for " ++ @typeName(T)),
    };
}

fn tokenOf(handle: anytype) registry.Handle {
    return @fromBackingInt(@intCast(if (handle) |h| @intFromPtr(h) else 0));
}

/// The C handle of an object just opened.
pub fn handleOf(comptime T: type, object: *T) *CHandle(T) {
    assert(object.handle != .none);
    return @ptrFromInt(@backingInt(object.handle));
}

/// The object of an open handle of type T, or null (NULL, closed already, another kind, or a
/// pointer no open returned).
pub fn resolve(comptime T: type, handle: ?*const CHandle(T)) ?*T {
    return T.fromOpenHandle(tokenOf(handle));
}

/// The open handle whose halves a binding passed, or null for NULL, a misaligned address or
/// a handle that is not open (resolve).
pub fn handleAt(comptime T: type, low: u32, high: u32) ?*T {
    return T.fromOpenHandle(@fromBackingInt(@intCast(numpy_array.join(low, high))));
}

pub fn closeHandle(comptime T: type, handle: ?*CHandle(T)) void {
    // NULL does nothing, and so does a handle already closed (a second close).
    T.closeHandle(tokenOf(handle));
}

/// 0 for a handle that is not open, and for a view one of whose stores was closed under it.
pub fn lengthOf(comptime T: type, handle: ?*const CHandle(T)) u64 {
    const object = resolve(T, handle) orelse return 0;
    if (T == View) object.checkOpen(object.stores.len - 1) catch return 0;
    return object.length();
}

/// Whether `count` items of `item_size` bytes, plus `extra` more, could not exist in memory:
/// such a count is a caller's bug, refused before any array is read.
pub fn countOverflows(count: u64, comptime item_size: u64, comptime extra: u64) bool {
    return count > std.math.maxInt(usize) / item_size - extra;
}

/// Whether a store appears more than once in `stores`, which this sorts by address.
pub fn sortedHasRepeat(stores: []*Store) bool {
    std.mem.sortUnstable(*Store, stores, {}, struct {
        fn lessThan(_: void, a: *Store, b: *Store) bool {
            return @intFromPtr(a) < @intFromPtr(b);
        }
    }.lessThan);
    for (stores[1..], stores[0 .. stores.len - 1]) |later, earlier| {
        if (later == earlier) return true;
    }
    return false;
}
