#include <stdio.h>
int main(void) { puts("hello from testbuild"); return 0; }
