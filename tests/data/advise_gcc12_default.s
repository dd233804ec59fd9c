	.file	"t.c"
	.text
	.p2align 4
	.globl	mfx_copy_64
	.type	mfx_copy_64, @function
mfx_copy_64:
.LFB22:
	.cfi_startproc
	movdqu	(%rsi), %xmm0
	movups	%xmm0, (%rdi)
	movdqu	16(%rsi), %xmm1
	movups	%xmm1, 16(%rdi)
	movdqu	32(%rsi), %xmm2
	movups	%xmm2, 32(%rdi)
	movdqu	48(%rsi), %xmm3
	movups	%xmm3, 48(%rdi)
	ret
	.cfi_endproc
.LFE22:
	.size	mfx_copy_64, .-mfx_copy_64
	.p2align 4
	.globl	mfx_copy_168
	.type	mfx_copy_168, @function
mfx_copy_168:
.LFB24:
	.cfi_startproc
	movdqu	(%rsi), %xmm0
	movups	%xmm0, (%rdi)
	movdqu	16(%rsi), %xmm1
	movups	%xmm1, 16(%rdi)
	movdqu	32(%rsi), %xmm2
	movups	%xmm2, 32(%rdi)
	movdqu	48(%rsi), %xmm3
	movups	%xmm3, 48(%rdi)
	movdqu	64(%rsi), %xmm4
	movups	%xmm4, 64(%rdi)
	movdqu	80(%rsi), %xmm5
	movups	%xmm5, 80(%rdi)
	movdqu	96(%rsi), %xmm6
	movups	%xmm6, 96(%rdi)
	movdqu	112(%rsi), %xmm7
	movups	%xmm7, 112(%rdi)
	movdqu	128(%rsi), %xmm0
	movups	%xmm0, 128(%rdi)
	movdqu	144(%rsi), %xmm1
	movups	%xmm1, 144(%rdi)
	movq	160(%rsi), %rax
	movq	%rax, 160(%rdi)
	ret
	.cfi_endproc
.LFE24:
	.size	mfx_copy_168, .-mfx_copy_168
	.p2align 4
	.globl	mfx_copy_1024
	.type	mfx_copy_1024, @function
mfx_copy_1024:
.LFB26:
	.cfi_startproc
	movq	(%rsi), %rax
	movq	%rdi, %rcx
	leaq	8(%rdi), %rdi
	movq	%rax, -8(%rdi)
	movq	1016(%rsi), %rax
	movq	%rax, 1008(%rdi)
	andq	$-8, %rdi
	subq	%rdi, %rcx
	subq	%rcx, %rsi
	addl	$1024, %ecx
	shrl	$3, %ecx
	rep movsq
	ret
	.cfi_endproc
.LFE26:
	.size	mfx_copy_1024, .-mfx_copy_1024
	.p2align 4
	.globl	mfx_copy_100000
	.type	mfx_copy_100000, @function
mfx_copy_100000:
.LFB28:
	.cfi_startproc
	movl	$100000, %edx
	jmp	memcpy@PLT
	.cfi_endproc
.LFE28:
	.size	mfx_copy_100000, .-mfx_copy_100000
	.p2align 4
	.globl	mfx_set_64
	.type	mfx_set_64, @function
mfx_set_64:
.LFB23:
	.cfi_startproc
	movd	%esi, %xmm0
	punpcklbw	%xmm0, %xmm0
	punpcklwd	%xmm0, %xmm0
	pshufd	$0, %xmm0, %xmm0
	movups	%xmm0, (%rdi)
	movups	%xmm0, 16(%rdi)
	movups	%xmm0, 32(%rdi)
	movups	%xmm0, 48(%rdi)
	ret
	.cfi_endproc
.LFE23:
	.size	mfx_set_64, .-mfx_set_64
	.p2align 4
	.globl	mfx_set_168
	.type	mfx_set_168, @function
mfx_set_168:
.LFB25:
	.cfi_startproc
	movd	%esi, %xmm0
	punpcklbw	%xmm0, %xmm0
	punpcklwd	%xmm0, %xmm0
	pshufd	$0, %xmm0, %xmm0
	movups	%xmm0, (%rdi)
	movups	%xmm0, 16(%rdi)
	movups	%xmm0, 32(%rdi)
	movups	%xmm0, 48(%rdi)
	movups	%xmm0, 64(%rdi)
	movups	%xmm0, 80(%rdi)
	movups	%xmm0, 96(%rdi)
	movups	%xmm0, 112(%rdi)
	movups	%xmm0, 128(%rdi)
	movups	%xmm0, 144(%rdi)
	movq	%xmm0, 160(%rdi)
	ret
	.cfi_endproc
.LFE25:
	.size	mfx_set_168, .-mfx_set_168
	.p2align 4
	.globl	mfx_set_1024
	.type	mfx_set_1024, @function
mfx_set_1024:
.LFB27:
	.cfi_startproc
	movzbl	%sil, %eax
	movq	%rdi, %rcx
	leaq	8(%rdi), %rdi
	movabsq	$72340172838076673, %rdx
	imulq	%rdx, %rax
	movq	%rax, -8(%rdi)
	movq	%rax, 1008(%rdi)
	andq	$-8, %rdi
	subq	%rdi, %rcx
	addl	$1024, %ecx
	shrl	$3, %ecx
	rep stosq
	ret
	.cfi_endproc
.LFE27:
	.size	mfx_set_1024, .-mfx_set_1024
	.p2align 4
	.globl	mfx_set_100000
	.type	mfx_set_100000, @function
mfx_set_100000:
.LFB29:
	.cfi_startproc
	movl	$100000, %edx
	jmp	memset@PLT
	.cfi_endproc
.LFE29:
	.size	mfx_set_100000, .-mfx_set_100000
	.p2align 4
	.type	run, @function
run:
.LFB31:
	.cfi_startproc
	pushq	%r15
	.cfi_def_cfa_offset 16
	.cfi_offset 15, -16
	pushq	%r14
	.cfi_def_cfa_offset 24
	.cfi_offset 14, -24
	pushq	%r13
	.cfi_def_cfa_offset 32
	.cfi_offset 13, -32
	movq	%rdx, %r13
	pushq	%r12
	.cfi_def_cfa_offset 40
	.cfi_offset 12, -40
	movq	%rdi, %r12
	movl	$1, %edi
	pushq	%rbp
	.cfi_def_cfa_offset 48
	.cfi_offset 6, -48
	movq	%r8, %rbp
	pushq	%rbx
	.cfi_def_cfa_offset 56
	.cfi_offset 3, -56
	movq	%rcx, %rbx
	subq	$40, %rsp
	.cfi_def_cfa_offset 96
	movl	fill_value(%rip), %r14d
	leaq	16(%rsp), %r15
	movl	%esi, 12(%rsp)
	movq	%r15, %rsi
	call	clock_gettime@PLT
	pxor	%xmm0, %xmm0
	pxor	%xmm1, %xmm1
	movl	12(%rsp), %r9d
	cvtsi2sdq	16(%rsp), %xmm0
	mulsd	.LC0(%rip), %xmm0
	cvtsi2sdq	24(%rsp), %xmm1
	addsd	%xmm1, %xmm0
	movsd	%xmm0, (%rsp)
	testl	%r9d, %r9d
	jne	.L11
	xorl	%ebx, %ebx
	testq	%rbp, %rbp
	jle	.L13
	.p2align 4,,10
	.p2align 3
.L12:
	addq	$1, %rbx
	movl	%r14d, %esi
	movq	%r13, %rdi
	call	*16(%r12)
	cmpq	%rbx, %rbp
	jne	.L12
.L13:
	movq	%r15, %rsi
	movl	$1, %edi
	call	clock_gettime@PLT
	pxor	%xmm0, %xmm0
	pxor	%xmm1, %xmm1
	cvtsi2sdq	16(%rsp), %xmm0
	mulsd	.LC0(%rip), %xmm0
	cvtsi2sdq	24(%rsp), %xmm1
	addsd	%xmm1, %xmm0
	subsd	(%rsp), %xmm0
	addq	$40, %rsp
	.cfi_remember_state
	.cfi_def_cfa_offset 56
	popq	%rbx
	.cfi_def_cfa_offset 48
	popq	%rbp
	.cfi_def_cfa_offset 40
	popq	%r12
	.cfi_def_cfa_offset 32
	popq	%r13
	.cfi_def_cfa_offset 24
	popq	%r14
	.cfi_def_cfa_offset 16
	popq	%r15
	.cfi_def_cfa_offset 8
	ret
	.p2align 4,,10
	.p2align 3
.L11:
	.cfi_restore_state
	testq	%rbp, %rbp
	jle	.L13
	xorl	%r14d, %r14d
	.p2align 4,,10
	.p2align 3
.L14:
	addq	$1, %r14
	movq	%rbx, %rsi
	movq	%r13, %rdi
	call	*8(%r12)
	cmpq	%r14, %rbp
	jne	.L14
	jmp	.L13
	.cfi_endproc
.LFE31:
	.size	run, .-run
	.section	.rodata.str1.8,"aMS",@progbits,1
	.align 8
.LC1:
	.string	"usage: %s copy|set SAMPLES MIN_NS\n"
	.section	.rodata.str1.1,"aMS",@progbits,1
.LC2:
	.string	"copy"
.LC3:
	.string	"%zu %.6f\n"
	.section	.text.startup,"ax",@progbits
	.p2align 4
	.globl	main
	.type	main, @function
main:
.LFB32:
	.cfi_startproc
	pushq	%r15
	.cfi_def_cfa_offset 16
	.cfi_offset 15, -16
	pushq	%r14
	.cfi_def_cfa_offset 24
	.cfi_offset 14, -24
	pushq	%r13
	.cfi_def_cfa_offset 32
	.cfi_offset 13, -32
	pushq	%r12
	.cfi_def_cfa_offset 40
	.cfi_offset 12, -40
	pushq	%rbp
	.cfi_def_cfa_offset 48
	.cfi_offset 6, -48
	pushq	%rbx
	.cfi_def_cfa_offset 56
	.cfi_offset 3, -56
	movq	%rsi, %rbx
	subq	$56, %rsp
	.cfi_def_cfa_offset 112
	cmpl	$4, %edi
	jne	.L37
	movq	8(%rsi), %rdi
	leaq	.LC2(%rip), %rsi
	call	strcmp@PLT
	movq	16(%rbx), %rdi
	movl	$10, %edx
	xorl	%esi, %esi
	movl	%eax, %r12d
	call	strtol@PLT
	movq	24(%rbx), %rdi
	xorl	%esi, %esi
	movq	%rax, %r15
	call	strtod@PLT
	leaq	32(%rsp), %rdi
	movl	$104096, %edx
	movl	$4096, %esi
	movsd	%xmm0, (%rsp)
	call	posix_memalign@PLT
	testl	%eax, %eax
	jne	.L23
	leaq	40(%rsp), %rdi
	movl	$104096, %edx
	movl	$4096, %esi
	movq	32(%rsp), %rbp
	call	posix_memalign@PLT
	testl	%eax, %eax
	movl	%eax, 8(%rsp)
	jne	.L23
	xorl	%r13d, %r13d
	testl	%r12d, %r12d
	movq	40(%rsp), %r12
	movl	$104096, %edx
	movl	$1, %esi
	movq	%rbp, %rdi
	sete	%r13b
	movl	%r15d, 24(%rsp)
	call	memset@PLT
	movl	$104096, %edx
	movq	%r12, %rdi
	movl	$2, %esi
	call	memset@PLT
	movl	8(%rsp), %ecx
	leaq	table(%rip), %rbx
	movl	%ecx, 28(%rsp)
.L29:
	movl	$1, %r15d
	jmp	.L24
	.p2align 4,,10
	.p2align 3
.L38:
	movabsq	$1099511627775, %rax
	cmpq	%rax, %r15
	jg	.L30
	addq	%r15, %r15
.L24:
	movq	%r15, %r8
	movq	%rbp, %rcx
	movq	%r12, %rdx
	movl	%r13d, %esi
	movq	%rbx, %rdi
	call	run
	movsd	(%rsp), %xmm1
	comisd	%xmm0, %xmm1
	ja	.L38
.L30:
	movl	24(%rsp), %eax
	testl	%eax, %eax
	jle	.L27
	pxor	%xmm3, %xmm3
	xorl	%r14d, %r14d
	movq	%r15, 16(%rsp)
	cvtsi2sdq	%r15, %xmm3
	movl	%r14d, %r15d
	movl	%eax, %r14d
	movsd	%xmm3, 8(%rsp)
	.p2align 4,,10
	.p2align 3
.L28:
	movq	16(%rsp), %r8
	movq	%rbp, %rcx
	movq	%r12, %rdx
	movl	%r13d, %esi
	movq	%rbx, %rdi
	addl	$1, %r15d
	call	run
	movq	(%rbx), %rsi
	movl	$1, %eax
	leaq	.LC3(%rip), %rdi
	divsd	8(%rsp), %xmm0
	call	printf@PLT
	cmpl	%r14d, %r15d
	jne	.L28
.L27:
	addq	$24, %rbx
	leaq	96+table(%rip), %rax
	cmpq	%rbx, %rax
	jne	.L29
	movl	28(%rsp), %ecx
.L20:
	addq	$56, %rsp
	.cfi_remember_state
	.cfi_def_cfa_offset 56
	movl	%ecx, %eax
	popq	%rbx
	.cfi_def_cfa_offset 48
	popq	%rbp
	.cfi_def_cfa_offset 40
	popq	%r12
	.cfi_def_cfa_offset 32
	popq	%r13
	.cfi_def_cfa_offset 24
	popq	%r14
	.cfi_def_cfa_offset 16
	popq	%r15
	.cfi_def_cfa_offset 8
	ret
.L23:
	.cfi_restore_state
	movl	$3, %ecx
	jmp	.L20
.L37:
	movq	(%rsi), %rdx
	movq	stderr(%rip), %rdi
	xorl	%eax, %eax
	leaq	.LC1(%rip), %rsi
	call	fprintf@PLT
	movl	$2, %ecx
	jmp	.L20
	.cfi_endproc
.LFE32:
	.size	main, .-main
	.globl	fill_value
	.data
	.align 4
	.type	fill_value, @object
	.size	fill_value, 4
fill_value:
	.long	90
	.section	.data.rel.ro.local,"aw"
	.align 32
	.type	table, @object
	.size	table, 96
table:
	.quad	64
	.quad	mfx_copy_64
	.quad	mfx_set_64
	.quad	168
	.quad	mfx_copy_168
	.quad	mfx_set_168
	.quad	1024
	.quad	mfx_copy_1024
	.quad	mfx_set_1024
	.quad	100000
	.quad	mfx_copy_100000
	.quad	mfx_set_100000
	.section	.rodata.cst8,"aM",@progbits,8
	.align 8
.LC0:
	.long	0
	.long	1104006501
	.ident	"GCC: (Debian 12.2.0-14+deb12u1) 12.2.0"
	.section	.note.GNU-stack,"",@progbits
