"""Admin for the demo domain."""

from django.contrib import admin

from project.demo.models import Account, LedgerEntry, Order, Slot


@admin.register(Order)
class OrderAdmin(admin.ModelAdmin):
    list_display = ["number", "customer", "status", "total"]
    list_filter = ["status"]


@admin.register(Slot)
class SlotAdmin(admin.ModelAdmin):
    list_display = ["resource", "starts_at", "booked_by"]


@admin.register(Account)
class AccountAdmin(admin.ModelAdmin):
    list_display = ["name", "owner", "balance", "version"]


@admin.register(LedgerEntry)
class LedgerEntryAdmin(admin.ModelAdmin):
    list_display = ["reference", "scope", "source", "receiver", "amount", "created_at"]
