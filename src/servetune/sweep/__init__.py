"""servetune.sweep"""
