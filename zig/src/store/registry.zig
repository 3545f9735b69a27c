//! The registry of the stores and views open in this process: what their handles at the C
//! boundary are, and the list a forked child walks to reset them.
//!
//! A handle is not the object's address but a token naming a slot of this table and the
//! generation the slot had when the object was added. Removing an object bumps its slot's
//! generation, so a handle closed already (a second close, a call after close) no longer
//! matches and is refused without reading the freed object; and an object opened later gets a
//! new token even when it reuses the freed memory or the same slot, so a stale handle never
//! reaches it. Looking a handle up takes no lock: a few loads, cheap beside any gather.
const std = @import("std");
const assert = std.debug.assert;
const pool = @import("../os/pool.zig");
const errors = @import("../base/errors.zig");
const diagnostic = @import("../base/diagnostic.zig");
const Error = errors.Error;

pub const Kind = enum(u8) { store = 1, view = 2 };

/// A handle as the C ABI carries it (an lx_store* or lx_view* that is never dereferenced).
/// Zero is never a handle.
pub const Handle = enum(usize) { none = 0, _ };

/// A handle's low bits are zero, as an aligned pointer's would be.
const alignment_bits = 3;
const slot_index_bits = 22;
const generation_bits = @bitSizeOf(usize) - slot_index_bits - alignment_bits;
pub const handle_count_max = 1 << slot_index_bits;
const segment_slot_count = 1 << 12;
const segment_count_max = handle_count_max / segment_slot_count;
const slot_index_mask: usize = handle_count_max - 1;
const generation_mask: u64 = (1 << generation_bits) - 1;
comptime {
    // A slot is reused 2^(generation_bits - 1) times before one of its tokens can recur.
    assert(generation_bits >= 32);
    assert(handle_count_max % segment_slot_count == 0);
}

const Slot = struct {
    /// Odd while the slot holds an open object: bumped when one is added and when it is removed.
    generation: std.atomic.Value(u64) = .init(0),
    /// The object's address and kind, written before the generation that publishes them.
    address: std.atomic.Value(usize) = .init(0),
    kind: std.atomic.Value(u8) = .init(0),
    /// The next free slot's index plus one (0 ends the list); guarded by `mutex`.
    next_free: u32 = 0,
};

/// Slots come in segments allocated as the table grows and never freed or moved, so a lookup
/// needs no lock: a segment pointer, once published, stays valid for the process.
const Segment = [segment_slot_count]Slot;

var segments: [segment_count_max]std.atomic.Value(?*Segment) = @splat(.init(null));
/// Guards adding and removing (the free list, slot_count, the segments' creation).
var mutex: std.Io.Mutex = .init;
/// Slots 0..slot_count have been used at least once.
var slot_count: u32 = 0;
/// The first free slot's index plus one (0: none free; a new slot is taken).
var free_head: u32 = 0;

fn slotAt(index: usize) ?*Slot {
    assert(index < handle_count_max);
    const segment = segments[index / segment_slot_count].load(.acquire) orelse return null;
    return &segment[index % segment_slot_count];
}

fn encode(index: u32, generation: u64) Handle {
    assert(generation % 2 == 1);
    const token = (@as(usize, @intCast(generation & generation_mask)) << (slot_index_bits + alignment_bits)) |
        (@as(usize, index) << alignment_bits);
    return @fromBackingInt(@intCast(token));
}

/// Publishes an open object and returns its handle.
pub fn add(kind: Kind, object: *anyopaque) Error!Handle {
    const io = pool.io();
    mutex.lockUncancelable(io);
    defer mutex.unlock(io);
    const index = try takeSlot();
    const slot = slotAt(index).?;
    const generation = slot.generation.load(.monotonic) + 1;
    assert(generation % 2 == 1);
    // Release stores: a reader that sees the new address sees the generation bump of the
    // removal before it too (see get's second read).
    slot.kind.store(@backingInt(kind), .release);
    slot.address.store(@intFromPtr(object), .release);
    slot.generation.store(generation, .release);
    return encode(index, generation);
}

fn takeSlot() Error!u32 {
    if (free_head != 0) {
        const index = free_head - 1;
        free_head = slotAt(index).?.next_free;
        return index;
    }
    if (slot_count == handle_count_max) {
        diagnostic.note("{d} stores and views are open in this process, the most it can hold; close some first", .{handle_count_max});
        return error.TooManyOpenFiles;
    }
    const segment_index = slot_count / segment_slot_count;
    if (segments[segment_index].load(.monotonic) == null) {
        // The page allocator, not a store's: the table outlives every store and view.
        const segment = std.heap.page_allocator.create(Segment) catch return errors.outOfMemory();
        segment.* = @splat(.{});
        segments[segment_index].store(segment, .release);
    }
    slot_count += 1;
    return slot_count - 1;
}

/// The slot a handle names, and the generation it was given with; null for a value that no
/// add returned (NULL, misaligned, an address, a slot never used).
fn decode(handle: Handle) ?struct { slot: *Slot, generation: u64 } {
    const token = @backingInt(handle);
    if (token % (1 << alignment_bits) != 0) return null;
    const generation: u64 = token >> (slot_index_bits + alignment_bits);
    if (generation % 2 == 0) return null;
    const slot = slotAt((token >> alignment_bits) & slot_index_mask) orelse return null;
    return .{ .slot = slot, .generation = generation };
}

/// The object of an open handle of this kind, or null: for NULL, a handle closed already, one
/// of the other kind, or any value no add returned. Takes no lock.
pub fn get(handle: Handle, kind: Kind) ?*anyopaque {
    const named = decode(handle) orelse return null;
    if (named.slot.generation.load(.acquire) & generation_mask != named.generation) return null;
    const address = named.slot.address.load(.acquire);
    const slot_kind = named.slot.kind.load(.acquire);
    // Read again: a close, and an open reusing the slot, between the two reads would hand on
    // another object. (A caller closing a handle while using it elsewhere is its own bug; this
    // keeps the answer a refusal rather than the wrong object.)
    if (named.slot.generation.load(.acquire) & generation_mask != named.generation) return null;
    if (slot_kind != @backingInt(kind)) return null;
    assert(address != 0);
    return @ptrFromInt(address);
}

/// Removes an open handle of this kind and returns its object, which the caller then frees;
/// null, with nothing changed, for anything get refuses. Of two threads removing one handle at
/// once, one gets the object.
pub fn remove(handle: Handle, kind: Kind) ?*anyopaque {
    const io = pool.io();
    mutex.lockUncancelable(io);
    defer mutex.unlock(io);
    const named = decode(handle) orelse return null;
    const generation = named.slot.generation.load(.monotonic);
    if (generation & generation_mask != named.generation) return null;
    if (named.slot.kind.load(.monotonic) != @backingInt(kind)) return null;
    named.slot.generation.store(generation + 1, .release);
    const index: u32 = @intCast((@backingInt(handle) >> alignment_bits) & slot_index_mask);
    named.slot.next_free = free_head;
    free_head = index + 1;
    return @ptrFromInt(named.slot.address.load(.monotonic));
}

/// In a forked child, which runs alone until it returns: the mutex starts afresh, and the
/// free list is rebuilt from the generations, because a parent thread may have been adding or
/// removing at the moment of fork. A slot whose add had not published it is free here (its
/// object never reached the child's caller); one published is open.
pub fn afterForkChild() void {
    mutex = .init;
    free_head = 0;
    var index = slot_count;
    while (index > 0) {
        index -= 1;
        const slot = slotAt(index).?;
        if (slot.generation.load(.monotonic) % 2 == 1) continue;
        slot.next_free = free_head;
        free_head = index + 1;
    }
}

/// The open objects of one kind, for a forked child's reset (it reads without the mutex: only
/// a child running alone may walk).
pub const Walk = struct {
    kind: Kind,
    index: u32 = 0,

    pub fn next(walk: *Walk) ?*anyopaque {
        while (walk.index < slot_count) {
            const slot = slotAt(walk.index).?;
            walk.index += 1;
            if (slot.generation.load(.monotonic) % 2 == 0) continue;
            if (slot.kind.load(.monotonic) != @backingInt(walk.kind)) continue;
            return @ptrFromInt(slot.address.load(.monotonic));
        }
        return null;
    }
};

// ---- tests -----------------------------------------------------------------------------------

const testing = std.testing;

test "a handle reads as open until removed, then never again, though its slot is reused" {
    var a: u64 = 1;
    var b: u64 = 2;
    const first = try add(.store, &a);
    try testing.expectEqual(@as(?*anyopaque, &a), get(first, .store));
    try testing.expectEqual(@as(?*anyopaque, null), get(first, .view));
    try testing.expectEqual(@as(?*anyopaque, null), remove(first, .view));
    try testing.expectEqual(@as(?*anyopaque, &a), remove(first, .store));
    try testing.expectEqual(@as(?*anyopaque, null), get(first, .store));
    try testing.expectEqual(@as(?*anyopaque, null), remove(first, .store));
    // The freed slot is the next one taken: the same slot, a new generation, a new handle.
    const second = try add(.store, &b);
    try testing.expect(second != first);
    try testing.expectEqual(@backingInt(first) % (1 << (slot_index_bits + alignment_bits)), @backingInt(second) % (1 << (slot_index_bits + alignment_bits)));
    try testing.expectEqual(@as(?*anyopaque, null), get(first, .store));
    try testing.expectEqual(@as(?*anyopaque, &b), get(second, .store));
    // The same address added again is yet another handle.
    const third = try add(.view, &a);
    try testing.expect(third != first);
    try testing.expectEqual(@as(?*anyopaque, null), get(first, .view));
    try testing.expectEqual(@as(?*anyopaque, &a), get(third, .view));
    try testing.expectEqual(@as(?*anyopaque, &a), remove(third, .view));
    try testing.expectEqual(@as(?*anyopaque, &b), remove(second, .store));
}

test "values no add returned are refused: NULL, misaligned, even generations, far slots, addresses" {
    var a: u64 = 0;
    const handle = try add(.store, &a);
    defer _ = remove(handle, .store);
    const token = @backingInt(handle);
    for ([_]usize{ 0, token + 1, token + 4, token ^ (1 << (slot_index_bits + alignment_bits)), (slot_index_mask << alignment_bits) | (1 << (slot_index_bits + alignment_bits)), @intFromPtr(&a) }) |value| {
        try testing.expectEqual(@as(?*anyopaque, null), get(@fromBackingInt(@intCast(value)), .store));
    }
}
