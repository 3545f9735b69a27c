//! The process's length generation: one counter, bumped after anything in this process changes
//! the length of a store (any store, any handle) or stops a handle guarding its store against
//! other handles. A view that has checked every store's length at generation g knows, while the
//! counter still reads g, that no length changed since without reading 64 mapped headers
//! (View.checkRouting). Changes made by another process never bump it: the view trusts the
//! counter only for stores whose handles hold open.lock shared (Locks.guardsLength), which no
//! other handle can shrink.
const std = @import("std");

/// Starts at 1 so that 0 can mean "never checked" to a cache of it.
var counter: std.atomic.Value(u64) = .init(1);

/// Called after the change is visible (a length published with release, a lock state changed):
/// a reader that sees the new value sees the change too.
pub fn bump() void {
    _ = counter.fetchAdd(1, .acq_rel);
}

/// Read before the facts it vouches for (acquire): a change published after this read bumps
/// the counter past the value returned.
pub fn current() u64 {
    return counter.load(.acquire);
}

test "the generation only grows and never reads as 0" {
    const before = current();
    try std.testing.expect(before != 0);
    bump();
    try std.testing.expect(current() > before);
}
