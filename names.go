package relock

import "strings"

// A lock is a key named after the lock, plus companion keys and channels (its release channel, a fair
// lock's queue, a read-write lock's read-hold keys, the fencing counter...). Every script touches the lock
// key and its companions together, so on Redis Cluster they must all hash to one slot; and Java services
// using Redisson must find the same companions. relock therefore builds them exactly as Redisson does:
//
//   - a companion of a lock is "<prefix>:" + base, where base is "{<name>}" for a name without "{", and
//     the name itself for a name with one (Redisson's prefixName);
//   - a read-write lock's read-hold keys are base + ":<owner>:rwlock_timeout:<n>" (Redisson's suffixName).
//
// Redis hashes only the content of a key's first "{...}" pair, when it is not empty. For a name without
// "{", base's tag is the whole name, in the name's own slot unless the name holds a "}" (the tag would end
// there). For a name with "{", base is the name, so every companion has the name's first "{...}" pair,
// and so its slot, unless that pair is missing or empty (then the name hashes whole, and its companions,
// being longer, elsewhere). The names for which Redisson's rule puts a companion in another slot than the
// lock are refused (ErrInvalidName) on every deployment, so that code does not break when it moves to a
// cluster: see validName.

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

// validName reports whether name can be a lock's name: not empty, and with every companion in its slot.
// That refuses exactly the names with a "{" but no hash tag after it (no "}" after the first "{", or
// "{}" there: "a{", "a{}", "{}a"), and the names with a "}" but no "{" ("a}", "}").
func validName(name string) bool {
	if name == "" {
		return false
	}
	if strings.IndexByte(name, '{') >= 0 {
		_, tagged := slotKey(name)
		return tagged
	}
	return strings.IndexByte(name, '}') < 0
}

// nameBase returns what follows a companion's prefix and ":" (Redisson's rule): "{name}", or the name
// itself when it contains "{". It also starts a read-write lock's read-hold keys.
func nameBase(name string) string {
	if strings.IndexByte(name, '{') >= 0 {
		return name
	}
	return "{" + name + "}"
}

// companion returns the key (or channel) prefix + ":" + nameBase(name).
func companion(prefix, name string) string {
	return prefix + ":" + nameBase(name)
}

// companions sets out[i] to companion(prefixes[i], name) for each of prefixes, built as substrings of one
// string, so that making a lock, which a caller may do for each use, costs one allocation for all its keys.
// out has room for them all.
func companions(out []string, name string, prefixes ...string) {
	tagged := strings.IndexByte(name, '{') >= 0
	base := len(name)
	if !tagged {
		base += 2
	}
	n := 0
	for _, p := range prefixes {
		n += len(p) + 1 + base
	}
	var b strings.Builder
	b.Grow(n)
	for _, p := range prefixes {
		b.WriteString(p)
		b.WriteByte(':')
		if tagged {
			b.WriteString(name)
		} else {
			b.WriteByte('{')
			b.WriteString(name)
			b.WriteByte('}')
		}
	}
	all := b.String()
	for i, p := range prefixes {
		out[i], all = all[:len(p)+1+base], all[len(p)+1+base:]
	}
}

// undoneKey is the hash where undone acquisition attempts of the lock name leave their marks
// (lua/lib/undone.lua).
func undoneKey(name string) string {
	return companion("relock_undone", name)
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
