// SPDX-License-Identifier: MIT
//
// preload_check_cxx.cc - the C++ allocation functions' contracts, checked
// through the exported operator new/delete family: plain, array, nothrow,
// sized, aligned, aligned + sized.  Run by tests/integration/test_preload_api.sh
// with and without LD_PRELOAD=libsheaf-malloc.so.
#include <dlfcn.h>
#include <malloc.h>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <new>
#include <vector>
#include <string>
#include <map>
#include <memory>

static int checks, fails;
#define CHECK(c)                                                                 \
	do {                                                                     \
		checks++;                                                        \
		if (!(c)) {                                                      \
			fails++;                                                 \
			std::printf("FAIL %s:%d: %s\n", __FILE__, __LINE__, #c); \
		}                                                                \
	} while (0)

struct alignas(256) Wide {
	char b[300];
};
struct alignas(8192) Huge {
	char b[100];
};
struct Small {
	int a, b, c;
	virtual ~Small()
	{
	}
};
struct Derived : Small {
	char pad[200];
};

static void *volatile sink;
static int handler_calls;

static void handler()
{
	handler_calls++;
	std::set_new_handler(nullptr); // the next failure throws
}

int main()
{
	auto counts = reinterpret_cast<void (*)(uint64_t *, uint64_t *)>(
		dlsym(RTLD_DEFAULT, "sheaf_preload_counts"));
	uint64_t m0 = 0, f0 = 0, m1 = 0, f1 = 0;
	if (counts)
		counts(&m0, &f0);

	// Plain and array forms; the compiler calls sized delete for these.
	for (int i = 0; i < 1000; i++) {
		int *p = new int(i);
		sink = p;
		CHECK(*p == i);
		delete p;
		char *a = new char[i + 1];
		sink = a;
		std::memset(a, 1, i + 1);
		delete[] a;
		Small *s = new Derived; // virtual destructor: sized delete of the dynamic size
		sink = s;
		delete s;
	}
	// Aligned new (C++17): over-aligned types.
	for (int i = 0; i < 100; i++) {
		Wide *w = new Wide;
		CHECK(reinterpret_cast<uintptr_t>(w) % 256 == 0);
		sink = w;
		delete w;
		Wide *wa = new Wide[3];
		CHECK(reinterpret_cast<uintptr_t>(wa) % 256 == 0);
		delete[] wa;
		Huge *h = new Huge;
		CHECK(reinterpret_cast<uintptr_t>(h) % 8192 == 0);
		delete h;
	}
	// Explicit calls of every form.
	void *p = ::operator new(100);
	::operator delete(p);
	p = ::operator new(100);
	::operator delete(p, 100);
	p = ::operator new[](100);
	::operator delete[](p, 100);
	p = ::operator new(100, std::nothrow);
	CHECK(p != nullptr);
	::operator delete(p, std::nothrow);
	p = ::operator new[](100, std::nothrow);
	::operator delete[](p, std::nothrow);
	for (size_t al = 1; al <= (1u << 20); al <<= 1) {
		p = ::operator new(24, std::align_val_t(al));
		CHECK(reinterpret_cast<uintptr_t>(p) % al == 0);
		::operator delete(p, 24, std::align_val_t(al));
		p = ::operator new[](5000, std::align_val_t(al));
		CHECK(reinterpret_cast<uintptr_t>(p) % al == 0);
		::operator delete[](p, std::align_val_t(al));
		p = ::operator new(77, std::align_val_t(al), std::nothrow);
		CHECK(p != nullptr && reinterpret_cast<uintptr_t>(p) % al == 0);
		::operator delete(p, std::align_val_t(al), std::nothrow);
		p = ::operator new[](77, std::align_val_t(al), std::nothrow);
		::operator delete[](p, 77, std::align_val_t(al));
	}
	// Failure: nothrow gives nullptr, the throwing form calls the handler, then throws.
	size_t too_big = SIZE_MAX / 2;
	CHECK(::operator new(too_big, std::nothrow) == nullptr);
	CHECK(::operator new[](too_big, std::align_val_t(64), std::nothrow) == nullptr);
	bool threw = false;
	std::set_new_handler(handler);
	try {
		sink = ::operator new(too_big);
	} catch (const std::bad_alloc &) {
		threw = true;
	}
	CHECK(threw && handler_calls == 1);
	threw = false;
	try {
		sink = ::operator new[](too_big, std::align_val_t(4096));
	} catch (const std::bad_alloc &) {
		threw = true;
	}
	CHECK(threw);
	// Containers.
	std::map<std::string, std::vector<int>> m;
	for (int i = 0; i < 5000; i++)
		m[std::to_string(i * 7919)].push_back(i);
	CHECK(m.size() == 5000);
	m.clear();
	auto sp = std::make_shared<Wide>();
	CHECK(reinterpret_cast<uintptr_t>(sp.get()) % 256 == 0);
	sp.reset();

	if (counts) {
		counts(&m1, &f1);
		CHECK(m1 - m0 > 5000 && f1 - f0 > 5000);
		std::printf("preload-check-cxx: served by sheaf-malloc (%llu news, %llu deletes)\n",
			    (unsigned long long)(m1 - m0), (unsigned long long)(f1 - f0));
	}
	std::printf("preload-check-cxx: %d checks, %d failed\n", checks, fails);
	return fails != 0;
}
