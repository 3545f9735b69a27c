//! LazyTable: a table with a static number of entries (a limit such as chunk_count_max) whose
//! memory is allocated a group of entries at a time, on first use. An open store sized for its
//! limits up front held about 330 KiB of such tables (chunk slots, runs, loaded checksum
//! blocks) even when it held ten records, and a sharded dataset keeps every shard open. A
//! group that was never created reads as entries holding their initial value.
//!
//! Readers look entries up lock-free (`peek`); whoever needs to change an entry creates its
//! group (`slot`), publishing it with one compare-and-swap, so racing creators agree on one
//! group and the loser frees its own. Groups live until `deinit`.
const std = @import("std");
const assert = std.debug.assert;
const Allocator = std.mem.Allocator;

pub fn LazyTable(comptime T: type, comptime entry_count: u32, comptime group_length: u32, comptime initial: T) type {
    comptime {
        assert(entry_count > 0 and group_length > 0);
        assert(entry_count % group_length == 0);
    }
    return struct {
        const Table = @This();
        pub const Group = [group_length]T;
        pub const group_count: u32 = entry_count / group_length;
        pub const count: u32 = entry_count;

        /// Group g holds entries g * group_length ..< (g + 1) * group_length; null until one of
        /// them is first needed. Published with release once every entry is initialised.
        groups: [group_count]std.atomic.Value(?*Group) = @splat(.init(null)),

        /// Entry `index` when its group exists; null means it still holds `initial`.
        pub inline fn peek(table: *const Table, index: usize) ?*T {
            assert(index < entry_count);
            const group = table.groups[index / group_length].load(.acquire) orelse return null;
            return &group[index % group_length];
        }

        /// Entry `index`, creating its group (every entry `initial`) when it has none yet.
        /// Thread-safe: concurrent callers get the same entry.
        pub fn slot(table: *Table, allocator: Allocator, index: usize) error{OutOfMemory}!*T {
            if (table.peek(index)) |entry| return entry;
            const created = try allocator.create(Group);
            created.* = @splat(initial);
            const cell = &table.groups[index / group_length];
            if (cell.cmpxchgStrong(null, created, .acq_rel, .acquire)) |winner| {
                // Another thread published first: its group is the one, ours was never seen.
                allocator.destroy(created);
                return &winner.?[index % group_length];
            }
            return &created[index % group_length];
        }

        /// Group `g` when it exists (for walks over every entry that may differ from `initial`).
        pub fn groupAt(table: *const Table, g: usize) ?*Group {
            assert(g < group_count);
            return table.groups[g].load(.acquire);
        }

        /// How many groups exist (each holds group_length entries).
        pub fn groupsCreated(table: *const Table) u32 {
            var created: u32 = 0;
            for (&table.groups) |*cell| created += @intFromBool(cell.load(.acquire) != null);
            return created;
        }

        /// Frees every group. The caller guarantees no other thread uses the table.
        pub fn deinit(table: *Table, allocator: Allocator) void {
            for (&table.groups) |*cell| {
                if (cell.load(.acquire)) |g| allocator.destroy(g);
                cell.store(null, .monotonic);
            }
        }
    };
}

const testing = std.testing;

test "lazy table: an entry reads as initial until its group is created, then only that group exists" {
    const Table = LazyTable(u64, 1 << 12, 64, 7);
    var table: Table = .{};
    defer table.deinit(testing.allocator);
    try testing.expectEqual(@as(u32, 0), table.groupsCreated());
    try testing.expect(table.peek(0) == null and table.peek(4095) == null);
    // The table itself is the group pointers only, not the 32 KiB of entries.
    try testing.expect(@sizeOf(Table) == 64 * @sizeOf(usize));

    const entry = try table.slot(testing.allocator, 130);
    try testing.expectEqual(@as(u64, 7), entry.*);
    entry.* = 99;
    try testing.expectEqual(@as(u32, 1), table.groupsCreated());
    // Its neighbours in the group exist with the initial value; other groups do not.
    try testing.expectEqual(@as(u64, 7), table.peek(128).?.*);
    try testing.expectEqual(@as(u64, 7), table.peek(191).?.*);
    try testing.expect(table.peek(127) == null and table.peek(192) == null);
    // The same entry again, not a fresh group.
    try testing.expectEqual(entry, try table.slot(testing.allocator, 130));
    try testing.expectEqual(@as(u64, 99), table.peek(130).?.*);
    try testing.expectEqual(@as(u32, 1), table.groupsCreated());
    _ = try table.slot(testing.allocator, 4095);
    try testing.expectEqual(@as(u32, 2), table.groupsCreated());
    try testing.expect(table.groupAt(63) != null and table.groupAt(0) == null);
}

test "lazy table: a failed allocation leaves the table as it was" {
    var failing = testing.FailingAllocator.init(testing.allocator, .{ .fail_index = 0 });
    const Table = LazyTable(u32, 1024, 256, 0);
    var table: Table = .{};
    defer table.deinit(testing.allocator);
    try testing.expectError(error.OutOfMemory, table.slot(failing.allocator(), 3));
    try testing.expectEqual(@as(u32, 0), table.groupsCreated());
    try testing.expect(table.peek(3) == null);
    (try table.slot(testing.allocator, 3)).* = 5;
    try testing.expectEqual(@as(u32, 5), table.peek(3).?.*);
}

test "lazy table: threads racing to create one group all get the same entry" {
    const Table = LazyTable(std.atomic.Value(u32), 1024, 256, .init(0));
    var table: Table = .{};
    defer table.deinit(testing.allocator);
    const Racer = struct {
        fn run(t: *Table, index: usize) void {
            const entry = t.slot(std.heap.c_allocator, index) catch unreachable;
            _ = entry.fetchAdd(1, .monotonic);
        }
    };
    var threads: [8]std.Thread = undefined;
    for (&threads, 0..) |*thread, k| thread.* = try std.Thread.spawn(.{}, Racer.run, .{ &table, 300 + k % 2 });
    for (threads) |thread| thread.join();
    try testing.expectEqual(@as(u32, 1), table.groupsCreated());
    try testing.expectEqual(@as(u32, 4), table.peek(300).?.load(.monotonic));
    try testing.expectEqual(@as(u32, 4), table.peek(301).?.load(.monotonic));
    // Created with c_allocator above: freed with it.
    table.deinit(std.heap.c_allocator);
}
