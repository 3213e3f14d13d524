package runtime

/*
#include "cvk.h"
*/
import "C"

import (
	"fmt"
	"sync"
)

// Message is one debug-utils message (warning or error) from the validation layer or the loader.
type Message struct {
	Severity string // "warning" or "error"
	Type     string // "validation", "performance" or "general"
	ID       string // e.g. VUID-VkBufferCreateInfo-size-00912
	Text     string
}

func (m Message) String() string { return fmt.Sprintf("%s %s: %s", m.Type, m.Severity, m.Text) }

type messageSink struct {
	tag uint64
	on  func(Message)
	mu  sync.Mutex
	got []Message
}

//export vkcGoDebugMessage
func vkcGoDebugMessage(tag C.uint64_t, severity, types C.uint32_t, id, text *C.char) {
	v, ok := sinks.Load(uint64(tag))
	if !ok {
		return
	}
	s := v.(*messageSink)
	m := Message{Severity: "warning", Type: "general", ID: C.GoString(id), Text: C.GoString(text)}
	if severity&0x1000 != 0 {
		m.Severity = "error"
	}
	switch {
	case types&0x2 != 0:
		m.Type = "validation"
	case types&0x4 != 0:
		m.Type = "performance"
	}
	s.mu.Lock()
	s.got = append(s.got, m)
	s.mu.Unlock()
	if s.on != nil {
		s.on(m)
	}
}

func (s *messageSink) take() []Message {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.got
	s.got = nil
	return m
}
