package relock

import "strings"

// A lock is a key named after the lock, plus companion keys and channels (its release channel, a fair
// lock's queue, a read-write lock's read-hold keys, the fencing counter...). Every script touches the lock
// key and its companions together, so on Redis Cluster they must all hash to one slot, and two locks'
// companions must never coincide. Redisson forms companions as "prefix:{name}", whose hash tag is the
// name itself: right for names without braces, which is every name relock sees in practice. A name with
// braces needs more care, because Redis hashes only the content of its first "{...}" pair:
//
//   - no braces: "prefix:{name}", Redisson's form;
//   - a hash tag t (the first "{" is followed, later, by a "}", with something between): "prefix:{t}:name",
//     in t's slot like the name, and distinct from every other name's companions (the tag is read up to
//     the first "}", so the name that follows it is recovered whole);
//   - a "{" but no tag, and no "}": "prefix:{name}", whose tag is the whole name, as the name's own hash is;
//   - a "}" without a tag before it: no tag can carry a "}", so no companion can share the name's slot.
//     Such names are refused (ErrInvalidName) on every deployment, so that code does not break when it
//     moves to a cluster.

// slotKey returns the part of key that Redis Cluster hashes to find its slot, and whether that is a hash
// tag (rather than the whole key).
func slotKey(key string) (string, bool) {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if n := strings.IndexByte(key[open+1:], '}'); n > 0 {
			return key[open+1 : open+1+n], true
		}
	}
	return key, false
}

// validName reports whether name can be a lock's name: non-empty, and with companions in its slot.
func validName(name string) bool {
	if name == "" {
		return false
	}
	_, tagged := slotKey(name)
	return tagged || !strings.Contains(name, "}")
}

// nameTag returns what follows a companion's prefix: "{name}", or "{t}:name" for a name with hash tag t.
// validName(name) must hold.
func nameTag(name string) string {
	if tag, tagged := slotKey(name); tagged {
		return "{" + tag + "}:" + name
	}
	return "{" + name + "}"
}

// companion returns the key (or channel) prefix:<nameTag>.
func companion(prefix, name string) string {
	return prefix + ":" + nameTag(name)
}

// slot returns the Redis Cluster slot of key (CRC16/XMODEM of its slot key, mod 16384).
func slot(key string) uint16 {
	s, _ := slotKey(key)
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for b := 0; b < 8; b++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % 16384
}
